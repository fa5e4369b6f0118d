"""Issue 36 end to end: the dataset is what the target model did. `regen run` (a real subprocess) against a
simulator that answers each prompt with a given text (`--replies`), streamed in 7-character deltas as in the
red-team report, and plain.

- Answers whose correct content is repetition (24 shapes, each ended by the model) are stored whole, on their first
  request, with their repetition measured (`repetition_chars`).
- Prose with a 50-character table row repeated for 650 characters, then prose again, is stored whole.
- A runaway loop whose unit holds a long `0, 0, 0, ...` run, in the answer or in the reasoning, and a looping
  paragraph are rejected `looping` (stopped by the guard, on its own finding), never stored cut.
- Whatever the path (streamed with the guard, without it, plain), no row with a finish_reason other than `stop` is
  accepted, and every accepted text equals what the server sent.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests.helpers.exactly_once import committed_ids, read_rows
from tests.helpers.processes import regen
from tests.helpers.repetitive import LEGIT, escaped_table_row, runaway

REASONING = "The user wants exactly this; I will write it out and stop."


def _replies(tmp_path: Path) -> tuple[Path, dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    kept = {name: (REASONING, text) for name, text in LEGIT.items()}
    kept["escaped_table_row"] = (REASONING, escaped_table_row())
    loops = {kind: runaway(kind) for kind in ("zeros_answer", "zeros_reasoning", "prose")}
    lines = [{"prompt": f"prompt {name}", "reasoning": r, "content": a} for name, (r, a) in kept.items()]
    lines += [
        {"prompt": f"prompt {name}", "reasoning": r, "content": a, "finish_reason": "length"}
        for name, (r, a) in loops.items()
    ]
    path = tmp_path / "replies.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path, kept, loops


def _server(tmp_path: Path, sim):
    """The simulator answering every prompt of `_replies` in 7-character deltas, at a decode rate; and the replies."""
    replies, kept, loops = _replies(tmp_path)
    server = sim(
        "--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--replies", str(replies),
        "--stream-chunk-chars", "7", "--decode-rate", "40000", "--max-running-requests", "8",
    )  # fmt: skip
    return server, kept, loops


def _config(tmp_path: Path, url: str, data: Path, *, client: str = "", select: str = "all") -> Path:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[input]
path = "{data}"
select = "{select}"
[output]
dir = "{tmp_path / "run"}"
shard_rows = 100
sync_interval_s = 0.2
[generation]
model = "Qwen3.6-27B"
max_tokens = 32768
[client]
max_attempts = 2
backoff_base_s = 0.01
backoff_max_s = 0.05
{client}
[[endpoints]]
url = "{url}"
concurrency = 8
"""
    )
    return cfg


def _run(tmp_path: Path, sim, client: str) -> tuple[dict, dict, list[dict], list[dict], dict]:
    server, kept, loops = _server(tmp_path, sim)
    prompts = tmp_path / "prompts.jsonl"
    names = [*kept, *loops]
    prompts.write_bytes(b"".join(orjson.dumps({"id": n, "prompt": f"prompt {n}"}) + b"\n" for n in names))
    cfg = _config(tmp_path, server.url, prompts, client=client)
    result = regen("run", str(cfg), "--no-progress", timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "run"
    placed = Counter(committed_ids(run_dir, "shards") + committed_ids(run_dir, "rejects"))
    assert set(placed) == set(names) and max(placed.values()) == 1  # every id exactly once
    status = regen("status", str(run_dir), "--json")
    assert status.returncode == 0, status.stderr
    return kept, loops, read_rows(run_dir, "shards"), read_rows(run_dir, "rejects"), server.stats()


@pytest.mark.parametrize(
    "client",
    ["", "loop_guard = false", "stream = false"],
    ids=["streamed-guarded", "streamed-unguarded", "plain"],
)
def test_stored_rows_are_what_the_model_finished(tmp_path: Path, sim, client: str) -> None:
    kept, loops, rows, rejects, stats = _run(tmp_path, sim, client)
    by_id = {r["id"]: r for r in rows}
    # every repetitive answer the model ended itself: stored whole, on its first request, its repetition measured
    assert set(by_id) == set(kept)
    for name, (reasoning, answer) in kept.items():
        row = by_id[name]
        assert row["finish_reason"] == "stop" and row["attempts"] == 1, name
        assert row["answer"] == answer.strip() and row["reasoning"] == reasoning, name  # edge whitespace aside
        assert row["turns"][0]["repetition_chars"] == row["repetition_chars"] is not None
    assert by_id["sentence_100_times"]["repetition_chars"] >= 2500
    assert by_id["one_third_1000_places"]["repetition_chars"] == 0  # 1,000 threes: under the filler rule's 2,000
    assert all(r["finish_reason"] == "stop" for r in rows)
    # the runaway loops: never stored, cut or whole
    reasons = {r["id"]: (r["reason"], r["detail"]) for r in rejects}
    assert set(reasons) == set(loops)
    for name in loops:
        reason, detail = reasons[name]
        if client == "":  # the guard stopped each one, on its own finding, and it was resampled once
            assert reason == "looping" and detail.startswith("stopped as it streamed: "), (name, detail)
        else:  # run to the limit: truncated, its loop named
            assert reason == "truncated" and "loops from char" in detail, (name, detail)
    assert "974-char unit" in reasons["zeros_answer"][1]  # the whole unit, not its `0, ` run
    assert "answer loops" in reasons["zeros_answer"][1] and "reasoning loops" in reasons["zeros_reasoning"][1]
    looped = stats["looping"]
    assert looped["generations"] == 2 * len(loops)  # two attempts each
    if client == "":  # each stopped at ~8,000 characters of repetition of its 60,000: far short of the limit
        assert looped["tokens"] < 0.3 * 2 * len(loops) * 60_000 / 4


def test_inspect_status_and_the_card_count_kept_repetition(tmp_path: Path, sim) -> None:
    _, loops, rows, _, _ = _run(tmp_path, sim, "")
    run_dir = tmp_path / "run"
    inspected = json.loads(regen("inspect", str(run_dir), "--json").stdout)
    repetitive = [r["repetition_chars"] for r in rows if r["repetition_chars"]]
    assert len(repetitive) >= 12
    assert inspected["repetition"]["rows"] == len(repetitive) + len(loops)  # the kept ones and the rejected loops
    status = json.loads(regen("status", str(run_dir), "--json").stdout)["repetition"]
    assert status == {"measured": len(rows), "rows": len(repetitive), "share": len(repetitive) / len(rows),
                      "longest_chars": max(repetitive)}  # fmt: skip
    text = regen("status", str(run_dir)).stdout
    assert f"kept repetition: {len(repetitive)} of {len(rows)} accepted rows" in text
    out = tmp_path / "export"
    assert regen("export", str(run_dir), "--format", "chat", "--out", str(out)).returncode == 0
    card = (out / "README.md").read_text()
    assert f"Repetition: {len(repetitive)} of {len(rows)} rows" in card and "kept on purpose" in card


def test_a_repair_pastes_only_what_the_model_finished(tmp_path: Path, sim) -> None:
    """The repair path: a dataset whose assistant turns are all broken (empty), regenerated with `input.select =
    "invalid"` and exported `--format repaired`: every repetitive answer pasted whole, each runaway loop left as it
    was (never a cut text), and the re-audit finds only those rows."""
    server, kept, loops = _server(tmp_path, sim)
    data = tmp_path / "broken.jsonl"
    names = [*kept, *loops]
    data.write_bytes(
        b"".join(
            orjson.dumps({"id": n, "conversations": [{"from": "human", "value": f"prompt {n}"},
                                                     {"from": "gpt", "value": ""}]}) + b"\n"
            for n in names
        )
    )  # fmt: skip
    cfg = _config(tmp_path, server.url, data, select="invalid")
    assert regen("audit", str(data)).returncode == 1
    result = regen("run", str(cfg), "--no-progress", timeout=300)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "repaired"
    exported = regen(
        "export", str(tmp_path / "run"), "--format", "repaired", "--original", str(data), "--out", str(out)
    )
    assert exported.returncode == 0, exported.stderr
    rows = {r["id"]: r for r in (orjson.loads(x) for x in (out / data.name).read_bytes().splitlines())}
    assert list(rows) == names
    for name, (_, answer) in kept.items():
        assert rows[name]["conversations"][1]["value"].endswith(answer.strip()), name  # pasted whole
    for name in loops:
        assert rows[name]["conversations"][1]["value"] == "", name  # left as it was: nothing cut pasted
    audit = regen("audit", str(out / data.name), "--json", "--ids-out", str(tmp_path / "left.txt"))
    assert audit.returncode == 1
    assert sorted((tmp_path / "left.txt").read_text().split()) == sorted(loops)
