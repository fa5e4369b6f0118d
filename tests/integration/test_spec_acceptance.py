"""End to end (issue 36): a run against the simulator with speculative decoding stores, for every accepted row and each
of its turns, the acceptance the server sent for that request; a server without it, or of a release that reports
none, leaves the columns null and the run's log says so once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.helpers import write_config, write_prompts
from tests.helpers.exactly_once import read_rows
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen

SPEC = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "200")
EAGLE = (*SPEC, "--speculative-algorithm", "EAGLE")


def _run(tmp_path: Path, url: str, *sets: str, n: int = 30) -> tuple[list[dict], str]:
    write_prompts(tmp_path / "prompts.jsonl", n=n)
    cfg = write_config(tmp_path, url)
    result = regen("run", str(cfg), "--no-progress", *(a for s in sets for a in ("--set", s)))
    assert result.returncode == 0, result.stderr
    return read_rows(tmp_path / "run", "shards"), result.stderr


def _sent(stats: dict, row: dict) -> list[float]:
    """What the simulator sent for the request that made `row` (its rid is `regen-<id>-<attempt>-<n>`)."""
    [rid] = [rid for rid in stats["spec_by_rid"] if rid.startswith(f"regen-{row['id']}-")]
    return stats["spec_by_rid"][rid]


@pytest.mark.parametrize("stream", ["true", "false"], ids=["streamed", "plain"])
def test_every_accepted_row_has_what_the_server_sent(tmp_path: Path, sim, stream: str) -> None:
    server = sim(*EAGLE)
    rows, log = _run(tmp_path, server.url, f"client.stream={stream}")
    stats = server.stats()
    assert len(rows) == 30 and len(stats["spec_by_rid"]) == 30
    for row in rows:
        accept, verify = _sent(stats, row)
        assert row["spec_verify_ct"] == verify and row["spec_accept_length"] == pytest.approx(accept, rel=1e-6)
        assert row["spec_accept_length"] == pytest.approx(row["completion_tokens"] / verify, rel=1e-6)
        [turn] = row["turns"]
        assert (turn["spec_accept_length"], turn["spec_verify_ct"]) == (row["spec_accept_length"], verify)
    assert "no speculative acceptance" not in log


@pytest.mark.parametrize(
    ("version", "stream", "asked"),
    [("0.5.14", "false", True), ("0.5.14", "true", False), ("0.5.9", "false", False)],
    ids=["0.5.14-plain", "0.5.14-streamed", "0.5.9"],
)
def test_older_releases_get_the_field_they_read(tmp_path: Path, sim, version: str, stream: str, asked: bool) -> None:
    server = sim(*EAGLE, "--sim-version", version)
    rows, log = _run(tmp_path, server.url, f"client.stream={stream}", n=10)
    assert len(rows) == 10
    stats = server.stats()
    if asked:  # return_meta_info: choices[0].meta_info
        assert all(row["spec_verify_ct"] == _sent(stats, row)[1] for row in rows)
        assert "no speculative acceptance" not in log
    else:  # 0.5.14 refuses return_meta_info on a stream; 0.5.9 has no field for it: nothing asked, nothing failed
        assert stats["spec_by_rid"] == {} and stats["errors"] == {}
        assert all(row["spec_accept_length"] is None and row["spec_verify_ct"] is None for row in rows)
        assert log.count("no speculative acceptance reported by") == 1
        assert f"SGLang {version}" in log


def test_a_server_without_speculative_decoding_leaves_the_columns_null(tmp_path: Path, sim) -> None:
    server = sim(*SPEC)
    rows, log = _run(tmp_path, server.url, n=10)
    assert len(rows) == 10
    assert all(r["spec_accept_length"] is None and r["spec_verify_ct"] is None for r in rows)
    assert all(t["spec_accept_length"] is None for r in rows for t in r["turns"])
    assert log.count("no speculative acceptance reported by") == 1
    assert "speculative_algorithm is null" in log


def test_status_inspect_and_the_card_show_the_figures(tmp_path: Path, sim) -> None:
    low, high = sim(*EAGLE, "--spec-accept-length", "2.0"), sim(*EAGLE, "--spec-accept-length", "3.5")
    write_prompts(tmp_path / "prompts.jsonl", n=60)
    cfg = write_config(tmp_path, low.url, extra=f'[[endpoints]]\nurl = "{high.url}"\nconcurrency = 16\n')
    assert regen("run", str(cfg), "--no-progress").returncode == 0
    run_dir = tmp_path / "run"
    rows = read_rows(run_dir, "shards")
    served = {url: [r["spec_accept_length"] for r in rows if r["endpoint"] == url] for url in (low.url, high.url)}
    assert all(served.values())  # both endpoints served some

    status = orjson.loads(regen("status", str(run_dir), "--json").stdout)["spec_accept_length"]
    assert status["turns"] == status["reported"] == 60
    assert status["mean"] == pytest.approx(float(np.mean([r["spec_accept_length"] for r in rows])), rel=1e-5)
    by = status["by_endpoint"]
    assert by[low.url]["mean"] == pytest.approx(float(np.mean(served[low.url])), rel=1e-5)
    assert by[low.url]["p90"] < by[high.url]["p10"]  # each server's own acceptance, not a blend
    assert "speculative acceptance (tokens per verify step" in regen("status", str(run_dir)).stdout

    report = orjson.loads(regen("inspect", str(run_dir), "--json").stdout)["spec_accept_length"]
    assert report["overall"]["mean"] == pytest.approx(status["mean"]) and report["of"] == "accepted"
    assert sum(g["turns"] for g in report["by_shard"].values()) == 60
    assert set(report["by_endpoint"]) == {low.url, high.url} and set(report["by_turn"]) == {"0"}
    assert sum(g["turns"] for g in report["by_length"].values()) == 60
    assert "speculative acceptance (tokens per verify step" in regen("inspect", str(run_dir)).stdout
    page = tmp_path / "inspect.html"
    assert regen("inspect", str(run_dir), "--html", str(page)).returncode == 0
    assert "<h2>Speculative acceptance</h2>" in page.read_text()

    out = tmp_path / "export"
    assert regen("export", str(run_dir), "--format", "chat", "--out", str(out)).returncode == 0
    card = (out / "README.md").read_text()
    assert f"acceptance on this data: mean {status['mean']:.2f} (p10 {status['p10']:.2f} .. p90" in card


def test_each_turn_of_a_conversation_keeps_its_own_request_s_acceptance(tmp_path: Path, sim) -> None:
    server = sim(*EAGLE)
    cfg = tmp_path / "conv.toml"
    cfg.write_text(
        f"""
[input]
path = "{ROOT / "data" / "sample_conversations.jsonl"}"
[output]
dir = "{tmp_path / "run"}"
[generation]
model = "Qwen3.6-27B"
[[endpoints]]
url = "{server.url}"
concurrency = 8
"""
    )
    assert regen("run", str(cfg), "--no-progress").returncode == 0
    rows = read_rows(tmp_path / "run", "shards")
    turns = [(t["spec_accept_length"], t["spec_verify_ct"]) for r in rows for t in r["turns"]]
    assert max(len(r["turns"]) for r in rows) > 1 and all(v is not None for pair in turns for v in pair)
    sent = sorted((float(np.float32(a)), v) for a, v in server.stats()["spec_by_rid"].values())  # stored as float32
    assert sorted(turns) == sent  # every request's figure, each stored once, on its own turn
    report = orjson.loads(regen("inspect", str(tmp_path / "run"), "--json").stdout)["spec_accept_length"]
    assert report["overall"]["turns"] == len(turns) and len(report["by_turn"]) == max(len(r["turns"]) for r in rows)
