"""A hand-built RUN_DIR of conversation rows for the export tests: `conv_row` writes a shard row as the dispatcher
does (`messages` as sent for the last turn, `turns` = every generated turn), `rows` gives three of them (a
three-turn chat with a system message, a single turn, one whose first answer was kept from the input), and
`make_conversation_run` commits them as one shard with a run.json."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from pipeline.config import Config
from pipeline.schema import shard_schema, to_table

ENDPOINTS = ("http://127.0.0.1:30000", "http://gpu-node-7.cluster.internal:30001")


def turn(k: int, rid: str, endpoint: str = ENDPOINTS[0]) -> dict[str, Any]:
    return {
        "reasoning": f"{rid} reasoning {k}",
        "answer": f"{rid} answer {k}",
        "finish_reason": "stop",
        "prompt_tokens": 10 * (k + 1),
        "completion_tokens": 100 + k,
        "reasoning_tokens": 60 + k,
        "endpoint": endpoint,
        "latency_s": 0.5,
        "attempts": 1,
    }


def conv_row(rid: str, users: list[str], *, system: str | None = None, kept: dict[int, str] | None = None) -> dict:
    """A shard row as the dispatcher writes it: `messages` = what was sent for the last turn (history answers
    only), `turns` = every generated turn. `kept` = assistant turns kept from the input (turns = "last")."""
    kept = kept or {}
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    turns = []
    for k, user in enumerate(users):
        messages.append({"role": "user", "content": user})
        if k == len(users) - 1:
            break
        if k in kept:
            messages.append({"role": "assistant", "content": kept[k]})
        else:
            turns.append(turn(len(turns), rid, ENDPOINTS[k % 2]))
            messages.append({"role": "assistant", "content": turns[-1]["answer"]})
    last = turn(len(turns), rid, ENDPOINTS[1])
    turns.append(last)
    return {
        "id": rid,
        "messages": messages,
        "reasoning": last["reasoning"],
        "answer": last["answer"],
        "finish_reason": "stop",
        "prompt_tokens": last["prompt_tokens"],
        "completion_tokens": last["completion_tokens"],
        "reasoning_tokens": last["reasoning_tokens"],
        "model": "Qwen3.6-27B",
        "endpoint": ENDPOINTS[1],
        "attempts": 1,
        "latency_s": 0.5,
        "seed": 7,
        "created_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        "turns": turns,
        "source": "unit",
    }


def rows() -> list[dict[str, Any]]:
    return [
        conv_row("multi", ["hi", "and then?", "last one"], system="be brief"),
        conv_row("single", ["only question"]),
        conv_row("kept", ["q1", "q2"], kept={0: "an answer from the input"}),
    ]


def make_conversation_run(run_dir: Path, shard_rows: list[dict[str, Any]] | None = None, **generation: Any) -> None:
    (run_dir / "shards").mkdir(parents=True)
    (run_dir / "rejects").mkdir()
    table = to_table(shard_rows or rows(), shard_schema(["source"]))
    pq.write_table(table, run_dir / "shards" / "part-w0-00000-00000000.parquet")
    config = Config().to_dict()
    config["generation"].update({"model": "Qwen3.6-27B", **generation})
    config["input"]["keep_fields"] = ["source"]
    config["endpoints"] = [{"url": url, "concurrency": 8} for url in ENDPOINTS]
    preflight = {"endpoints": [{"url": url, "ok": True, "version": "0.5.23", "checks": []} for url in ENDPOINTS]}
    (run_dir / "run.json").write_bytes(orjson.dumps({"config": config, "preflight": preflight}))
