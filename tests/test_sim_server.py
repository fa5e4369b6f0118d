"""The simulator over real HTTP: routes, response shapes, stream shapes, errors, auth, determinism."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from pipeline.sim import SimConfig, prompt_key
from tests.helpers.sim_in_process import run

MSGS = [{"role": "user", "content": "What is 6 times 7?"}]


def chat_body(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": MSGS, "max_tokens": 4000, **kw}


def events(raw: str) -> list[Any]:
    out = []
    for block in raw.split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: ") :]
            out.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return out


QWEN3 = SimConfig(reasoning_parser="qwen3", mean_output_tokens=200)


def test_chat_non_stream_shape() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        r = await c.post("/v1/chat/completions", json=chat_body(model="whatever-name"))
        assert r.status_code == 200
        body = r.json()
        assert len(body["id"]) == 32 and body["object"] == "chat.completion"
        assert body["model"] == "whatever-name"
        choice = body["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["matched_stop"] == 151645
        message = choice["message"]
        assert "tool_calls" not in message
        assert message["content"].startswith("\n\nThe answer is")
        assert len(message["reasoning_content"]) > len(message["content"])  # thinking is the bulk
        usage = body["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert usage["prompt_tokens_details"] is None
        assert usage["completion_tokens_details"] == {"reasoning_tokens": usage["reasoning_tokens"]}
        assert usage["reasoning_tokens"] == len(message["reasoning_content"]) // 4 + 1
        assert body["metadata"] == {"weight_version": "default"}
        chars = len(message["content"]) + len(message["reasoning_content"])
        assert 3.5 <= chars / usage["completion_tokens"] <= 4.0

    run(QWEN3, check)


def test_truncation_inside_thinking() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        body = (await c.post("/v1/chat/completions", json=chat_body(max_tokens=20))).json()
        choice = body["choices"][0]
        assert choice["finish_reason"] == "length" and choice["matched_stop"] is None
        assert choice["message"]["content"] == ""
        assert len(choice["message"]["reasoning_content"]) == 80
        assert body["usage"]["completion_tokens"] == 20

    run(QWEN3, check)


def test_thinking_off_and_parser_off() -> None:
    async def check_off(c: httpx.AsyncClient) -> None:
        body = chat_body(chat_template_kwargs={"enable_thinking": False})
        message = (await c.post("/v1/chat/completions", json=body)).json()["choices"][0]["message"]
        assert message["reasoning_content"] is None and message["content"].startswith("\n\nThe answer")
        raw = (await c.post("/v1/chat/completions", json=chat_body(separate_reasoning=False))).json()
        content = raw["choices"][0]["message"]["content"]
        assert raw["choices"][0]["message"]["reasoning_content"] is None
        assert "</think>" in content and not content.startswith("<think>")

    run(QWEN3, check_off)

    async def check_no_parser(c: httpx.AsyncClient) -> None:
        body = (await c.post("/v1/chat/completions", json=chat_body())).json()
        assert body["choices"][0]["message"]["reasoning_content"] is None
        assert "</think>\n\nThe answer is" in body["choices"][0]["message"]["content"]
        assert body["usage"]["reasoning_tokens"] == 0

    run(SimConfig(mean_output_tokens=200), check_no_parser)


def test_stream_0_5_23_chunk_order_and_usage() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        body = chat_body(stream=True, stream_options={"include_usage": True})
        r = await c.post("/v1/chat/completions", json=body)
        assert r.headers["content-type"].startswith("text/event-stream")
        ev = events(r.text)
        assert ev[-1] == "[DONE]"
        role, *middle, finish, usage_chunk, _ = ev
        assert role["choices"][0]["delta"] == {"role": "assistant", "content": "", "reasoning_content": None}
        assert "usage" not in role
        assert finish["choices"][0]["delta"] == {"reasoning_content": None}
        assert finish["choices"][0]["finish_reason"] == "stop"
        assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] > 0
        reasoning = "".join(e["choices"][0]["delta"].get("reasoning_content") or "" for e in middle)
        content = "".join(e["choices"][0]["delta"].get("content") or "" for e in middle)
        kinds = ["c" if "content" in e["choices"][0]["delta"] else "r" for e in middle]
        assert kinds == sorted(kinds, reverse=True)  # all reasoning, then all content
        whole = (await c.post("/v1/chat/completions", json=chat_body())).json()["choices"][0]["message"]
        assert (reasoning, content) == (whole["reasoning_content"], whole["content"])

    run(QWEN3, check)


def test_stream_0_5_9_shape() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        ev = events((await c.post("/v1/chat/completions", json=chat_body(stream=True))).text)
        assert ev[-1] == "[DONE]"
        for chunk in ev[:-1]:
            assert chunk["usage"] is None
            assert set(chunk["choices"][0]["delta"]) == {"role", "content", "reasoning_content", "tool_calls"}
        # validation errors arrive inside a 200 stream on 0.5.9
        r = await c.post("/v1/chat/completions", json=chat_body(stream=True, messages=[]))
        assert r.status_code == 200
        assert events(r.text)[0]["error"]["code"] == 400

    run(SimConfig(reasoning_parser="qwen3", mean_output_tokens=100, version="0.5.9"), check)


def test_content_null_on_0_5_10_and_no_reasoning_tokens_on_0_5_9() -> None:
    async def check_10(c: httpx.AsyncClient) -> None:
        body = (await c.post("/v1/chat/completions", json=chat_body(max_tokens=5))).json()
        assert body["choices"][0]["message"]["content"] is None
        assert body["usage"]["completion_tokens_details"] is None

    run(SimConfig(reasoning_parser="qwen3", model_path="Qwen/Qwen3-8B", version="0.5.10"), check_10)

    async def check_9(c: httpx.AsyncClient) -> None:
        body = (await c.post("/v1/chat/completions", json=chat_body())).json()
        assert body["usage"]["reasoning_tokens"] == 0
        assert "completion_tokens_details" not in body["usage"]

    run(SimConfig(reasoning_parser="qwen3", version="0.5.9"), check_9)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"messages": []}, 400, "Messages cannot be empty."),
        ({"max_tokens": -1}, 400, "max_new_tokens must be at least 0, got -1."),
        ({"max_tokens": 5000}, 400, "max_completion_tokens is too large: 5000.This model supports at most 4096"),
        ({"top_p": 1.5}, 400, "top_p must be in (0, 1], got 1.5."),
        ({"model": "qwen3:8b"}, 400, "LoRA adapter '8b' was requested, but LoRA is not enabled."),
        ({"max_tokens": 4090}, 400, "Requested token count exceeds the model's maximum context length of 4096"),
        ({"messages": [{"role": "user", "content": "x" * 20000}]}, 400, "The input (5007 tokens) is longer than"),
    ],
    ids=["empty", "negative", "too-large", "top_p", "lora", "prompt+max", "prompt-too-long"],
)
def test_validation_errors(body: dict[str, Any], status: int, message: str) -> None:
    async def check(c: httpx.AsyncClient) -> None:
        r = await c.post("/v1/chat/completions", json={**chat_body(), **body})
        assert r.status_code == status
        err = r.json()
        assert err["object"] == "error" and err["code"] == status and err["param"] is None
        assert err["message"].startswith(message)

    run(SimConfig(context_length=4096), check)


def test_content_type_and_bad_json() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        r = await c.post(
            "/v1/chat/completions", content=orjson.dumps(chat_body()), headers={"Content-Type": "text/plain"}
        )
        assert r.status_code == 400 and r.json()["type"] == "Bad Request"
        r = await c.post("/v1/chat/completions", content=b"{nope", headers={"Content-Type": "application/json"})
        assert r.status_code == 400

    run(SimConfig(), check)


def test_auth() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        r = await c.post("/v1/chat/completions", json=chat_body())
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
        assert (await c.get("/health")).status_code == 200
        ok = await c.post("/v1/chat/completions", json=chat_body(), headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200

    run(SimConfig(api_key="s3cret"), check)


def test_determinism_same_request_same_bytes() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        def strip(raw: bytes) -> bytes:
            body = orjson.loads(raw)
            body.pop("created")
            return orjson.dumps(body)

        req = chat_body(rid="fixed-id", temperature=0.6, seed=3)
        a = (await c.post("/v1/chat/completions", json=req)).content
        b = (await c.post("/v1/chat/completions", json=req)).content
        assert strip(a) == strip(b)
        other = (await c.post("/v1/chat/completions", json={**req, "seed": 4})).content
        assert strip(other) != strip(a)
        sa = (await c.post("/v1/chat/completions", json={**req, "stream": True})).text
        sb = (await c.post("/v1/chat/completions", json={**req, "stream": True})).text
        assert _strip_created(sa) == _strip_created(sb)

    run(QWEN3, check)


def _strip_created(raw: str) -> list[Any]:
    out = []
    for e in events(raw):
        if isinstance(e, dict):
            e.pop("created", None)
        out.append(e)
    return out


def test_duplicate_rid_and_stats_and_probes() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        await c.post("/v1/chat/completions", json=chat_body(rid="a"))
        await c.post("/v1/chat/completions", json=chat_body(rid="b"))
        await c.post(
            "/v1/chat/completions", json=chat_body(rid="regen-probe-1", messages=[{"role": "user", "content": "p"}])
        )
        stats = (await c.get("/_sim/stats")).json()
        assert stats["generations"] == {prompt_key(MSGS): 2}
        assert stats["generations_by_rid"] == {"a": 1, "b": 1}
        assert stats["duplicate_generations"] == 1
        assert stats["probes"] == {"requests": 1, "generations": 1}
        assert stats["requests"] == 3 and stats["in_flight"] == 0
        await c.post("/_sim/reset")
        assert (await c.get("/_sim/stats")).json()["requests"] == 0

    run(SimConfig(mean_output_tokens=50), check)


def test_brief_stats_are_the_totals_without_the_maps_by_prompt() -> None:
    """`?brief=1` (what preflight asks to tell the simulator): the same body less the maps that hold an entry per
    prompt or rid served, so its size does not grow with a run's progress."""

    async def check(c: httpx.AsyncClient) -> None:
        for rid in ("a", "b", "c"):
            await c.post("/v1/chat/completions", json=chat_body(rid=rid, messages=[{"role": "user", "content": rid}]))
        full = (await c.get("/_sim/stats")).json()
        brief = (await c.get("/_sim/stats", params={"brief": "1"})).json()
        maps = {"generations", "generations_by_rid", "with_tools", "spec_by_rid"}
        assert full.keys() - brief.keys() == maps
        assert brief == {k: v for k, v in full.items() if k not in maps}
        assert brief["generations_total"] == 3 and len(full["generations_by_rid"]) == 3

    run(SimConfig(mean_output_tokens=50), check)


def test_info_routes() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        info = (await c.get("/server_info")).json()
        assert info == {**(await c.get("/get_server_info")).json(), "internal_states": info["internal_states"]}
        assert info["speculative_algorithm"] == "EAGLE" and info["max_running_requests"] == 48
        assert info["speculative_num_draft_tokens"] == 4
        assert info["mamba_radix_cache_strategy"] == "extra_buffer"
        assert info["served_model_name"] == "Qwen3.6-27B" and info["version"] == "0.5.23"
        state = info["internal_states"][0]
        assert state["effective_max_running_requests_per_dp"] == 48
        models = (await c.get("/v1/models")).json()
        assert models["data"][0]["id"] == "Qwen3.6-27B" and models["data"][0]["max_model_len"] == 262144
        assert (await c.get("/v1/models/nope")).status_code == 404
        model_info = (await c.get("/model_info")).json()
        assert model_info["served_model_name"] == "Qwen3.6-27B"
        assert (await c.get("/get_model_info")).json() == model_info
        loads = (await c.get("/v1/loads")).json()
        assert loads["loads"][0]["max_running_requests"] == 48
        metrics = (await c.get("/metrics")).text
        assert 'sglang:num_running_reqs{model_name="Qwen3.6-27B"} 0' in metrics
        gen = (await c.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 8}})).json()
        assert gen["meta_info"]["finish_reason"] == {"type": "length", "length": 8}
        assert gen["meta_info"]["spec_verify_ct"] >= 1
        assert gen["meta_info"]["spec_accept_length"] == 8 / gen["meta_info"]["spec_verify_ct"]
        assert len(gen["output_ids"]) == 8
        info = (await c.get("/server_info")).json()
        assert info["internal_states"][0]["avg_spec_accept_length"] > 1
        assert (await c.get("/ready")).status_code == 200
        assert (await c.get("/health_generate")).status_code == 200
        assert (await c.post("/abort_request", json={"rid": "nothing"})).status_code == 200

    run(SimConfig(served_model_name="Qwen3.6-27B", speculative_algorithm="EAGLE", enable_metrics=True), check)


def test_metrics_off_by_default_and_completions_route() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        assert (await c.get("/metrics")).status_code == 404
        body = (await c.post("/v1/completions", json={"model": "m", "prompt": "Once"})).json()
        assert body["object"] == "text_completion" and body["usage"]["completion_tokens"] == 16
        assert body["choices"][0]["finish_reason"] == "length"
        r = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 0})
        assert r.status_code == 400 and r.json()["type"] == "Bad Request"
        stream = events((await c.post("/v1/completions", json={"prompt": "x", "stream": True})).text)
        assert stream[-1] == "[DONE]" and stream[-2]["choices"][0]["finish_reason"] == "length"

    run(SimConfig(), check)
