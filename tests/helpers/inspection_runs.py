"""Hand-built RUN_DIRs for the inspection tests: written with the real schema, with known defects planted.

The run: 4 shards of 50 accepted rows (2 row groups each), rows served round-robin by endpoints A, B, C, and
one rejects file. Planted: shard 0002 holds 20 empty answers and 10 looping reasonings (the bad shard);
endpoint B has 25 `empty_response` rejects against 5 `truncated` ones elsewhere (the bad endpoint); one
canned answer is given to 5 prompts spread over the shards; 4 answers are "ok" (suspiciously short).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from pipeline.schema import reject_schema, shard_schema, to_table

A, B, C = "http://a:30000", "http://b:30000", "http://c:30000"
ENDPOINTS = (A, B, C)
T0 = 1_780_000_000.0
LOOP = "Wait, let me reconsider the whole problem from the start. " * 40
CANNED = "I'm sorry, but I can't help with that request."
WORDS = "the of model token answer prime shard value proof sum graph node edge step check result".split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def row(i: int, rng: random.Random, **over: Any) -> dict[str, Any]:
    reasoning = words(rng, rng.randint(80, 200))
    answer = words(rng, rng.randint(30, 60))
    base = {
        "id": f"p{i:05d}",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"question {i}?"}],
        "reasoning": reasoning,
        "answer": answer,
        "finish_reason": "stop",
        "prompt_tokens": 20,
        "completion_tokens": 300 + i % 50,
        "reasoning_tokens": 200 + i % 50,
        "model": "m",
        "endpoint": ENDPOINTS[i % 3],
        "attempts": 1,
        "latency_s": 1.0 + (i % 3),
        "seed": 0,
        "created_at": int((T0 + i) * 1e6),
    }
    base.update(over)
    return base


def shard_rows(shard: int, rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for k in range(50):
        i = shard * 50 + k
        over: dict[str, Any] = {}
        if shard == 2 and k < 20:
            over["answer"] = ""
        elif shard == 2 and k < 30:
            over["reasoning"] = LOOP
        if k == 40 or (shard == 0 and k == 41):
            over["answer"] = CANNED
        if k == 45:
            over["answer"] = "ok"
        rows.append(row(i, rng, **over))
    return rows


def reject_rows(rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for k in range(25):
        i = 1000 + k
        rows.append(
            row(
                i,
                rng,
                endpoint=B,
                answer="",
                reasoning="",
                reason="empty_response",
                detail="no answer",
                finish_reason="stop",
            )
        )
    for k in range(5):
        i = 1100 + k
        rows.append(
            row(
                i,
                rng,
                endpoint=(A, C)[k % 2],
                finish_reason="length",
                reason="truncated",
                detail="finish_reason=length",
            )
        )
    return rows


def write(path: Path, rows: list[dict[str, Any]], rejects: bool = False, group: int = 25) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = reject_schema() if rejects else shard_schema()
    pq.write_table(to_table(rows, schema), path, row_group_size=group)


def build_run(root: Path, *, total_extra: int = 0, validate: dict[str, Any] | None = None) -> Path:
    """The committed run described in the module docstring; returns RUN_DIR."""
    rng = random.Random(7)
    run = root / "run"
    for s in range(4):
        write(run / "shards" / f"w0-{s:04d}.parquet", shard_rows(s, rng))
    write(run / "rejects" / "w0-0000.parquet", reject_rows(rng), rejects=True)
    (run / "shards" / ".w0-0004.parquet.tmp").write_bytes(b"half written")
    manifest = {
        "schema_version": 1,
        "config_hash": "x",
        # the strict loop rule unless told otherwise: shard 2's looping rows (ended by the model) are found
        "config": {
            "generation": {"thinking": True},
            "validate": {"reject_looping": "any"} if validate is None else validate,
        },
        "input": {"files": ["in.jsonl"], "total": 230 + total_extra},
        "counts": {},
        "started_at": T0,
        "updated_at": T0 + 300,
    }
    (run / "run.json").write_bytes(orjson.dumps(manifest))
    return run


def add_journal(run: Path, rng: random.Random | None = None) -> None:
    """A journal of an in-progress run: 3 new accepted, 1 new rejected, 1 already committed, a torn tail."""
    rng = rng or random.Random(3)
    lines = [orjson.dumps({"kind": "accepted", "row": row(2000 + k, rng)}) for k in range(3)]
    lines.append(orjson.dumps({"kind": "rejected", "row": row(2100, rng, reason="http_4xx", detail="400")}))
    lines.append(orjson.dumps({"kind": "accepted", "row": row(0, rng)}))  # p00000, committed in shard 0
    torn = orjson.dumps({"kind": "accepted", "row": row(2200, rng)})[:40]
    (run / "journal").mkdir(exist_ok=True)
    (run / "journal" / "worker-0.3.jsonl").write_bytes(b"\n".join(lines) + b"\n" + torn)
