"""Tool conversations and other real shapes (issue 27): every tool shape read as OpenAI's, which turns are kept and
which generated, the row's tools in the request's shape, content parts in LLaMA-Factory's `value` shape, media
refused naming them, the `tool_call` verdict, and the simulator's tool calls over real HTTP. The LLaMA-Factory
files are read where they are (../shared/datasets/llamafactory), never copied."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from pipeline import conversation as conv
from pipeline.config import GenerationConfig, InputConfig, ValidateConfig
from pipeline.endpoints.sse import parse_stream
from pipeline.inputs import conversations
from pipeline.inputs.batch_lines import Unhonoured
from pipeline.inputs.reader import PromptReader
from pipeline.records import BadInput, Completion, Prompt
from pipeline.sim import SimConfig, serve
from pipeline.validator import validate
from tests.helpers.paths import SHARED, needs_shared

LLAMAFACTORY = SHARED / "datasets" / "llamafactory"
GLAIVE = LLAMAFACTORY / "glaive_toolcall_en_demo.json"
V1_SFT = LLAMAFACTORY / "v1_sft_demo.jsonl"
REASON_TOOLS = LLAMAFACTORY / "reason_tool_use_demo_50.jsonl"
MLLM = LLAMAFACTORY / "mllm_demo.json"

U1 = {"role": "user", "content": "weather in Paris?"}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CALLED = {"role": "assistant", "content": "", "tool_calls": [CALL]}
RESULT = {"role": "tool", "content": '{"temp": 21}'}
ANSWER = {"role": "assistant", "content": "It is 21 degrees."}


@pytest.mark.parametrize(
    "given",
    [
        pytest.param(
            [
                {"from": "human", "value": "weather in Paris?"},
                {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
                {"from": "observation", "value": '{"temp": 21}'},
                {"from": "gpt", "value": "It is 21 degrees."},
            ],
            id="sharegpt-function_call-observation",
        ),
        pytest.param([U1, CALLED, RESULT, ANSWER], id="openai-tool_calls"),
        pytest.param(
            [
                U1,
                {"role": "assistant", "content": None, "tool_calls": json.dumps([CALL])},
                {"role": "function", "content": '{"temp": 21}'},
                ANSWER,
            ],
            id="tool_calls-as-json-string-and-function-role",
        ),
        pytest.param(
            [
                U1,
                {"role": "assistant", "content": None, "function_call": CALL["function"]},
                RESULT,
                ANSWER,
            ],
            id="legacy-function_call",
        ),
        pytest.param(
            [
                {"role": "user", "content": [{"type": "text", "value": "weather in Paris?"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_call", "value": '{"name": "get_weather", "arguments": {"city": "Paris"}}'}
                    ],
                },
                {"role": "tool", "content": [{"type": "text", "value": '{"temp": 21}'}]},
                {"role": "assistant", "content": [{"type": "text", "value": "It is 21 degrees."}]},
            ],
            id="llamafactory-tool_call-parts",
        ),
    ],
)
def test_every_tool_shape_reads_as_openai_tool_calls_and_results(given: list[dict[str, Any]]) -> None:
    messages = conversations.parse(given, "messages")
    assert messages == (U1, CALLED, RESULT, ANSWER)
    assert conv.turn_positions(messages, "all") == (3,)  # the call and its result are kept, the answer generated


def test_an_openai_call_keeps_its_id_and_a_result_its_tool_call_id() -> None:
    call = {"id": "call_1", **CALL}
    result = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21"}
    messages = conversations.parse([U1, {"role": "assistant", "content": "", "tool_calls": [call]}, result], "m")
    assert messages[1]["tool_calls"] == [call]
    assert messages[2] == result
    assert conv.turn_positions(messages, "all") == (3,)  # a trailing tool result: one new turn answers it


def test_reasoning_parts_become_the_turns_reasoning_and_value_parts_are_text() -> None:
    assistant = {
        "role": "assistant",
        "content": [{"type": "reasoning", "value": "think"}, {"type": "text", "value": "done"}],
        "loss_weight": 1.0,
    }
    _, got = conversations.parse(
        [{"role": "user", "content": [{"type": "text", "value": "hi"}]}, assistant], "messages"
    )
    assert got == {"role": "assistant", "content": "done", "reasoning_content": "think"}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param(
            [{"type": "image_url", "image_url": {"url": "x"}}],
            r"messages\[0\]\.content\[0\] is an 'image_url' part: the run is text-only and would answer without the "
            r"image",
            id="image-part",
        ),
        pytest.param(
            [{"type": "input_audio", "input_audio": {}}], r"'input_audio' part: the run is text-only", id="audio"
        ),
        pytest.param(
            [{"type": "chart", "value": "x"}],
            r"messages\[0\]\.content\[0\] has the unknown part type 'chart'; parts may be text, reasoning or "
            r"tool_call",
            id="unknown-part",
        ),
        pytest.param(["x"], r"content\[0\] must be a content part \{type, text\}, got string 'x'", id="bare-string"),
        pytest.param([{"type": "text", "value": 3}], r"content\[0\]\.value must be a string, got int", id="number"),
        pytest.param(
            [{"type": "tool_call", "value": "{}"}], r"a 'tool_call' part in a user message", id="user-calls-a-tool"
        ),
    ],
)
def test_parts_that_cannot_be_read_name_the_part(content: list[Any], match: str) -> None:
    with pytest.raises(conv.ConversationError, match=match):
        conversations.parse([{"role": "user", "content": content}], "messages")


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        pytest.param([U1, RESULT], "a tool result that answers no tool call", id="result-without-call"),
        pytest.param([U1, CALLED], "no assistant text turn to generate", id="ends-in-a-call"),
        pytest.param([U1, CALLED, ANSWER], "follows no user turn or tool result", id="answer-without-result"),
        pytest.param(
            [U1, {"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}]}],
            r"messages\[1\]\.tool_calls\[0\] is a tool call without a name",
            id="call-without-name",
        ),
        pytest.param(
            [U1, {"from": "function_call", "value": "{not json"}],
            r"messages\[1\]\.value is not valid JSON",
            id="call-not-json",
        ),
    ],
)
def test_tool_conversations_that_cannot_be_regenerated(messages: list[dict[str, Any]], match: str) -> None:
    with pytest.raises(conv.ConversationError, match=match):
        conv.turn_positions(conversations.parse(messages, "messages"), "all")


def test_turns_last_generates_the_answer_after_the_last_tool_result() -> None:
    second = {"role": "user", "content": "and Rome?"}
    messages = (U1, ANSWER, second, CALLED, RESULT, ANSWER)
    assert conv.turn_positions(messages, "all") == (1, 5)
    assert conv.turn_positions(messages, "last") == (5,)


def test_the_request_keeps_calls_and_results_and_drops_kept_reasoning_unless_asked() -> None:
    thought_call = {**CALLED, "reasoning_content": "I should call get_weather"}
    messages = (U1, thought_call, RESULT, ANSWER)
    sent = conv.request(messages, (3,), 0, [])
    assert sent == [U1, CALLED, RESULT]  # byte for byte, without the input's reasoning
    assert conv.request(messages, (3,), 0, [], kept_reasoning=True) == [U1, thought_call, RESULT]


@pytest.mark.parametrize(
    ("tools", "want"),
    [
        pytest.param(
            json.dumps([{"name": "f", "description": "d", "parameters": {"type": "object"}}]),
            ({"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}},),
            id="glaive-bare-json-string",
        ),
        pytest.param(
            [{"type": "function", "function": {"name": "f"}}],
            ({"type": "function", "function": {"name": "f"}},),
            id="openai-list",
        ),
        pytest.param("[]", (), id="empty"),
        pytest.param(None, (), id="none"),
    ],
)
def test_tools_are_read_in_the_requests_shape(tools: Any, want: tuple[dict[str, Any], ...]) -> None:
    assert conversations.tools({"tools": tools}) == want


@pytest.mark.parametrize(
    ("tools", "match"),
    [
        pytest.param("[{bad", "tools is not valid JSON", id="not-json"),
        pytest.param({"name": "f"}, "tools must be a list", id="object"),
        pytest.param([{"description": "no name"}], r"tools\[0\] is a tool without a name", id="no-name"),
    ],
)
def test_bad_tools_name_the_field(tools: Any, match: str) -> None:
    with pytest.raises(conv.ConversationError, match=match):
        conversations.tools({"tools": tools})


def test_a_text_turn_that_calls_a_tool_is_rejected_with_its_own_reason() -> None:
    cfg = ValidateConfig()
    called = Completion("thinking", "", "tool_calls", 10, 10, tool_calls=(CALL,))
    verdict = validate(called, cfg)
    assert (verdict.ok, verdict.reason, verdict.detail) == (
        False,
        "tool_call",
        "called get_weather instead of answering",
    )
    bare = validate(Completion("thinking", "", "tool_calls", 10, 10), cfg)
    assert bare.reason == "tool_call" and "finish_reason=tool_calls" in bare.detail
    assert validate(Completion("thinking", "an answer that is long enough", "stop", 1, 1), cfg).ok


def _read(path: Path, **kw: Any) -> list[Prompt | BadInput]:
    reader = PromptReader(InputConfig(path=str(path), dedupe=True, **kw), generation=GenerationConfig())
    return [item for batch in reader.iter_batches() for item in batch]


@needs_shared("datasets")
def test_glaive_reads_every_row_with_its_tools_wrapped() -> None:
    items = _read(GLAIVE)
    assert len(items) == 265  # 300 rows, 35 exact copies of others (input.dedupe keeps the first)
    assert not [i for i in items if isinstance(i, BadInput)]
    with_calls = [p for p in items if isinstance(p, Prompt) and any(conv.is_tool_call(m) for m in p.messages)]
    assert len(with_calls) == 138  # the 153 rows with function_call turns, less their copies
    for prompt in with_calls:
        assert prompt.tools and all(t["type"] == "function" and t["function"]["name"] for t in prompt.tools)
        assert not any(conv.is_tool_call(prompt.messages[i]) for i in prompt.positions if i < len(prompt.messages))


@needs_shared("datasets")
def test_the_llamafactory_part_files_read_and_the_image_rows_are_refused_naming_the_images() -> None:
    v1 = _read(V1_SFT)
    assert len(v1) == 499 and all(isinstance(p, Prompt) for p in v1)  # 500 rows, one exact copy
    reasoned = _read(REASON_TOOLS)
    refused = [b for b in reasoned if isinstance(b, BadInput)]
    # 11 rows end in a tool call with no result and no text turn: nothing to generate while calls are kept
    assert len(refused) == 11 and all("ends in a tool call" in b.detail for b in refused)
    images = _read(MLLM)
    assert len(images) == 6 and all(isinstance(b, BadInput) for b in images)
    assert all("'images' column" in b.detail and "text-only" in b.detail for b in images if isinstance(b, BadInput))


def test_two_rows_that_differ_only_in_their_tools_get_two_ids(tmp_path: Path) -> None:
    rows = [{"messages": [U1], "tools": [{"name": "a"}]}, {"messages": [U1], "tools": [{"name": "b"}]}]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    first, second = _read(path)
    assert isinstance(first, Prompt) and isinstance(second, Prompt) and first.id != second.id


def _sim_call(config: SimConfig, body: dict[str, Any], times: int = 1) -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        async with serve(config) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            return [(await client.post("/v1/chat/completions", json=body)).json() for _ in range(times)]

    return asyncio.run(main())


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def _body(marker: str, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"hi {marker}"}], "tools": TOOLS, **kw}


def test_the_simulator_calls_a_tool_as_sglang_does_with_a_parser() -> None:
    config = SimConfig(reasoning_parser="qwen3", mean_output_tokens=50, extra_args={"tool_call_parser": "qwen25"})
    once, again = _sim_call(config, _body("[[sim:tool_call_once]]"), times=2)
    choice = once["choices"][0]
    assert (choice["finish_reason"], choice["matched_stop"], choice["message"]["content"]) == ("tool_calls", None, "")
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": "{}"}
    assert again["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in again["choices"][0]["message"]


def test_the_simulator_without_a_parser_leaves_the_call_in_the_text() -> None:
    config = SimConfig(reasoning_parser="qwen3", mean_output_tokens=50)
    (body,) = _sim_call(config, _body("[[sim:tool_call]]"))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"].startswith("<tool_call>")


def test_the_simulator_refuses_a_tool_without_a_function() -> None:
    (body,) = _sim_call(SimConfig(), {**_body(""), "tools": [{"type": "function"}]})
    assert body["code"] == 400 and "tools.0.function: Field required" in body["message"]


def test_an_openai_batch_body_sends_its_tools_and_does_not_list_them_as_unhonoured(tmp_path: Path) -> None:
    body = {"model": "m", "messages": [U1], "tools": [{"type": "function", "function": {"name": "get_weather"}}]}
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}
    path = tmp_path / "batch.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    (prompt,) = _read(path, format="openai-batch")
    assert isinstance(prompt, Prompt) and prompt.tools == tuple(body["tools"])
    unhonoured = Unhonoured(request_overrides=False, model="m")
    unhonoured.note(line)
    assert unhonoured.counts == {}


def test_a_streamed_call_in_pieces_adds_up_to_one_call() -> None:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        return b"data: " + orjson.dumps({"id": "x", "model": "m", "choices": [choice]}) + b"\n\n"

    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"ci'}}
    rest = {"index": 0, "function": {"arguments": 'ty": "Paris"}'}}
    body = event({"role": "assistant", "content": ""}) + event({"reasoning_content": "think"})
    body += (
        event({"tool_calls": [first]}) + event({"tool_calls": [rest]}) + event({}, "tool_calls") + b"data: [DONE]\n\n"
    )
    parsed = parse_stream(body)
    assert parsed.finish_reason == "tool_calls" and parsed.reasoning == "think"
    assert parsed.tool_calls == (
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
    )
