"""Every judge of a text uses the one loop detector: `regen audit` over a dataset file and `regen inspect` over a
RUN_DIR flag exactly the real looping traces (../shared/traces, read in place and written to tmp_path only)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.inspection import inspect_run
from tests.helpers.inspection_runs import row, write
from tests.helpers.paths import SHARED, needs_shared

TRACES = SHARED / "traces"
pytestmark = needs_shared("traces", "normal.jsonl")
N = 25  # traces of each kind


def _traces() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    def read(name: str) -> list[dict[str, Any]]:
        with open(TRACES / name, encoding="utf-8") as f:
            return [json.loads(line) for line in f][:N]

    return read("normal.jsonl"), read("looping.jsonl")


def _conversation(i: int, reasoning: str, answer: str) -> dict[str, Any]:
    return {
        "id": f"t{i:03d}",
        "messages": [
            {"role": "user", "content": f"problem {i}"},
            {"role": "assistant", "content": answer, "reasoning_content": reasoning},
        ],
    }


def test_audit_flags_exactly_the_looping_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each real loop as a stored turn: cut at the limit (no answer after it) it is `looping` by default; followed
    by an answer (the model ended it) only with the strict rule; no normal trace is ever flagged."""
    normal, looping = _traces()
    rows = [_conversation(i, t["reasoning"], t["answer"]) for i, t in enumerate(normal)]
    rows += [_conversation(N + i, t["reasoning"], "") for i, t in enumerate(looping)]  # ran to the limit
    # a loop the model escaped: it answered after the loop, so only the detector can see it
    rows += [_conversation(2 * N + i, t["reasoning"], "So the answer is 7.") for i, t in enumerate(looping)]
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ids = tmp_path / "bad.txt"
    assert main(["audit", str(path), "--json", "--ids-out", str(ids)]) == 1
    report = json.loads(capsys.readouterr().out)
    flagged = ids.read_text().split()
    assert flagged[:N] == [f"t{N + i:03d}" for i in range(N)]  # every one cut while looping: not answer_in_reasoning
    escaped = set(flagged[N:])  # answered after the loop: only those repeating more than a finished answer does
    assert escaped <= {f"t{2 * N + i:03d}" for i in range(N)}
    assert report["by_reason"] == {"looping": len(flagged)}
    strict = tmp_path / "strict.toml"
    strict.write_text('[validate]\nreject_looping = "any"\n')
    assert main(["audit", str(path), "--json", "--config", str(strict), "--ids-out", str(ids)]) == 1
    assert json.loads(capsys.readouterr().out)["by_reason"] == {"looping": 2 * N}
    assert ids.read_text().split() == [f"t{N + i:03d}" for i in range(2 * N)]


def test_inspect_counts_exactly_the_looping_rows(tmp_path: Path) -> None:
    normal, looping = _traces()
    rng = random.Random(1)
    rows = [row(i, rng, reasoning=t["reasoning"]) for i, t in enumerate(normal)]
    # each loop escaped: more ordinary reasoning follows it, so the end of the text does not repeat
    escaped = [
        t["reasoning"] + "\n\nLet me start over.\n\n" + normal[i]["reasoning"][:3000] for i, t in enumerate(looping)
    ]
    rows += [row(N + i, rng, reasoning=text) for i, text in enumerate(escaped)]
    run = tmp_path / "run"
    write(run / "shards" / "w0-0000.parquet", rows)
    (run / "run.json").write_text(json.dumps({"schema_version": 2, "config": {}, "input": {"total": 2 * N}}))
    rep = inspect_run(run)["repetition"]
    assert (rep["rows"], rep["checked"]) == (N, 2 * N)
    assert set(rep["examples"]) <= {f"p{N + i:05d}" for i in range(N)}
