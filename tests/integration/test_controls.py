"""The smaller findings of a day at the controls (issue 38, item 6), each through the real CLI against the simulator
over HTTP: what `--limit` says it will do, a short-answer line that is the same in every run, reports with nothing
missing after a label, an audit histogram that starts at 0, a chat export whose user turns carry no reasoning key,
a card that says what the token columns count, and `--html` into a folder that does not exist yet."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from tests.helpers import SIM_FLAGS, write_config, write_prompts
from tests.helpers.paths import ROOT
from tests.helpers.processes import SimProcess, regen


def _run(tmp_path: Path, server: SimProcess, *args: str) -> Path:
    result = regen("run", str(write_config(tmp_path, server.url)), "--no-progress", *args)
    assert result.returncode == 0, result.stderr
    return tmp_path / "run"


def test_limit_says_how_many_prompts_this_invocation_does(tmp_path: Path, sim) -> None:
    write_prompts(tmp_path / "prompts.jsonl", 20)
    result = regen("run", str(write_config(tmp_path, sim(*SIM_FLAGS).url)), "--no-progress", "--limit", "5")
    assert result.returncode == 0, result.stderr
    assert "owns 20 prompts, 0 already done, 20 to do; 5 now (--limit 5)" in result.stderr
    plain = regen("run", str(tmp_path / "run.toml"), "--no-progress")  # no --limit: the line says nothing of it
    assert "owns 20 prompts, 5 already done, 15 to do\n" in plain.stderr


def test_the_short_answer_line_is_the_same_in_every_run(tmp_path: Path, sim) -> None:
    thresholds = []
    for tokens in ("4", "400"):  # medians far apart: the line once followed them (< 1 .. < 32 bytes)
        where = tmp_path / tokens
        where.mkdir()
        write_prompts(where / "prompts.jsonl", 30)
        run = _run(where, sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3",
                              "--mean-output-tokens", tokens))  # fmt: skip
        report = json.loads(regen("inspect", str(run), "--json").stdout)
        thresholds.append(report["short_answers"]["threshold_bytes"])
        assert f"short answers (< {thresholds[-1]} bytes)" in regen("inspect", str(run)).stdout
    assert thresholds == [20, 20]


def test_the_html_report_of_a_run_without_rejects_says_none(tmp_path: Path, sim) -> None:
    write_prompts(tmp_path / "prompts.jsonl", 10)
    run = _run(tmp_path, sim(*SIM_FLAGS))
    page = tmp_path / "new" / "folder" / "report.html"  # a folder that does not exist yet: created
    result = regen("inspect", str(run), "--html", str(page))
    assert result.returncode == 0, result.stderr
    assert "<li>rejected by reason: none</li>" in page.read_text()
    (tmp_path / "a-file").write_text("")
    refused = regen("inspect", str(run), "--html", str(tmp_path / "a-file" / "report.html"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "cannot write the HTML report: a file stands where its folder would be" in refused.stderr


def test_audit_html_into_a_missing_folder_and_a_histogram_of_zeros_from_0(tmp_path: Path) -> None:
    data = ROOT / "data" / "sample_conversations.jsonl"  # every stored answer and reasoning is empty
    page = tmp_path / "not" / "yet" / "audit.html"
    result = regen("audit", str(data), "--html", str(page), "--json")
    assert result.returncode == 1 and page.exists(), result.stderr
    for name, hist in json.loads(result.stdout)["histograms"].items():
        assert hist["edges"][0] == 0 and hist["edges"][-1] == 1, name  # not -0.5 .. 0.5
        assert all(type(n) is int for n in hist["counts"]) and sum(hist["counts"]) > 0, name  # whole turns


def test_chat_jsonl_puts_reasoning_on_assistant_turns_only_and_the_card_says_what_tokens_count(
    tmp_path: Path, sim
) -> None:
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
             {"role": "assistant", "content": "old"}, {"role": "user", "content": "And then?"}]  # fmt: skip
    (tmp_path / "prompts.jsonl").write_bytes(orjson.dumps({"id": "multi", "messages": turns}) + b"\n")
    run = _run(tmp_path, sim(*SIM_FLAGS))
    out = tmp_path / "chat"
    result = regen("export", str(run), "--format", "chat", "--file-format", "jsonl", "--out", str(out))
    assert result.returncode == 0, result.stderr
    (line,) = (out / "data" / "train-00000.jsonl").read_bytes().splitlines()
    messages = orjson.loads(line)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert [("reasoning_content" in m) for m in messages] == [False, False, True, False, True]
    assert all(m["reasoning_content"] for m in messages if m["role"] == "assistant")
    card = (out / "README.md").read_text()
    assert "describe a row's last generated turn: a multi-turn conversation's earlier turns are not counted" in card
