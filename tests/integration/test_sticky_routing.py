"""Conversation-sticky routing (issue 14) against three real simulators over HTTP: every later turn goes to the
endpoint of the turn before while it is healthy, so the servers' prefix caches hold the history; without
stickiness turns scatter; an endpoint that dies hands its conversations to the others; the summary reports reuse."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import httpx
import orjson
import pyarrow.parquet as pq

from tests.helpers import assert_exactly_once
from tests.helpers.processes import SimProcess, regen

# A capacity model (8 decoding at once, 200-token completions in ~0.1 s), so the pool is saturated and placement is
# a real choice; every server reports cached tokens.
SIM = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "200")
LOADED = ("--decode-rate", "20000", "--max-running-requests", "8", "--prefill-rate", "400000")


def _conversations(path: Path, n: int, turns: int = 4) -> list[str]:
    """ShareGPT rows of `turns` user turns each, the old answers empty (the broken dataset)."""
    ids = []
    with open(path, "wb") as fh:
        for i in range(n):
            conv = [{"from": "system", "value": f"You are assistant #{i % 3}. " * 20}]
            for k in range(turns):
                conv += [
                    {"from": "human", "value": f"conv {i} question {k}: " + "why? " * 60},
                    {"from": "gpt", "value": ""},
                ]
            ids.append(f"c{i:04d}")
            fh.write(orjson.dumps({"id": ids[-1], "conversations": conv}) + b"\n")
    return ids


def _config(tmp_path: Path, prompts: Path, urls: list[str], client: str = "", name: str = "run") -> Path:
    cfg = tmp_path / f"{name}.toml"
    eps = "".join(f'[[endpoints]]\nurl = "{u}"\nconcurrency = 8\n' for u in urls)
    cfg.write_text(
        f'[input]\npath = "{prompts}"\n[output]\ndir = "{tmp_path / name}"\nsync_interval_s = 0.1\n'
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 4096\n'
        f"[client]\nbackoff_base_s = 0.01\nhealth_interval_s = 1\n{client}\n{eps}"
    )
    return cfg


def _turn_endpoints(run_dir: Path) -> dict[str, list[str]]:
    rows = [r for p in sorted((run_dir / "shards").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["id"]: [t["endpoint"] for t in r["turns"]] for r in rows}


def _reuse(placements: dict[str, list[str]]) -> float:
    pairs = [(a, b) for eps in placements.values() for a, b in itertools.pairwise(eps)]
    return sum(a == b for a, b in pairs) / len(pairs)


def _metrics(run_dir: Path) -> dict:
    return orjson.loads((run_dir / "metrics" / "worker-0.jsonl").read_bytes().splitlines()[-1])


def test_later_turns_stay_on_their_conversation_endpoint(tmp_path: Path, sim) -> None:
    servers: list[SimProcess] = [sim(*SIM, *LOADED, "--enable-cache-report", "--seed", str(i)) for i in range(3)]
    prompts = tmp_path / "conversations.jsonl"
    ids = _conversations(prompts, 90)
    urls = [s.url for s in servers]

    done = regen("run", str(_config(tmp_path, prompts, urls)), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert_exactly_once(tmp_path / "run", ids)
    placements = _turn_endpoints(tmp_path / "run")
    assert len(placements) == 90 and all(len(eps) == 4 for eps in placements.values())
    sticky = _reuse(placements)
    assert sticky >= 0.95
    assert len({eps[0] for eps in placements.values()}) == 3  # first turns still spread over every server
    snap = _metrics(tmp_path / "run")
    assert snap["later_turns"] == 270 and snap["later_turns_same_endpoint"] / 270 == sticky
    assert f"prefix reuse: {snap['later_turns_same_endpoint']}/270 later turns" in done.stderr
    cached = sum(s.stats()["prefix_cache"]["cached_tokens"] for s in servers)
    prompt_tokens = sum(s.stats()["prefix_cache"]["prompt_tokens"] for s in servers)

    # The same conversations with stickiness off: least-loaded placement scatters the turns over the servers.
    for s in servers:
        assert httpx.post(f"{s.url}/flush_cache", timeout=5).status_code == 200
        assert httpx.post(f"{s.url}/_sim/reset", timeout=5).status_code == 200
    off = regen(
        "run", str(_config(tmp_path, prompts, urls, "sticky_conversations = false", name="off")), "--no-progress"
    )
    assert off.returncode == 0, off.stderr
    scattered = _reuse(_turn_endpoints(tmp_path / "off"))
    assert scattered < 0.75 < sticky
    cached_off = sum(s.stats()["prefix_cache"]["cached_tokens"] for s in servers)
    prompt_off = sum(s.stats()["prefix_cache"]["prompt_tokens"] for s in servers)
    assert cached / prompt_tokens > cached_off / prompt_off + 0.1


def test_a_dead_endpoint_hands_its_conversations_to_the_others(tmp_path: Path, sim) -> None:
    dying = sim(*SIM, *LOADED, "--die-after", "40")
    servers = [dying, sim(*SIM, *LOADED, "--seed", "1"), sim(*SIM, *LOADED, "--seed", "2")]
    prompts = tmp_path / "conversations.jsonl"
    ids = _conversations(prompts, 60)
    start = time.monotonic()
    done = regen("run", str(_config(tmp_path, prompts, [s.url for s in servers])), "--no-progress", timeout=120)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    good, bad = assert_exactly_once(tmp_path / "run", ids)
    assert bad == [] and len(good) == 60
    placements = _turn_endpoints(tmp_path / "run")
    handed_over = [eps for eps in placements.values() if eps[0] == dying.url and eps[-1] != dying.url]
    assert handed_over, "no conversation of the dead server moved"
    for eps in placements.values():  # once moved, a conversation stays on its new server and never goes back
        moved = [i for i, (a, b) in enumerate(itertools.pairwise(eps)) if a != b]
        assert len(moved) <= 1, eps
        if moved:
            assert eps[moved[0]] == dying.url
    assert elapsed < 60  # no turn sat out its sticky wait on a dead server
