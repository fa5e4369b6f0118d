"""What an export must not reveal (pipeline/dataset/redact.py): whole host names and URLs are scrubbed, and nothing
else: a short host name (`a`, `c`, `gpu1`) must not garble the words that contain it."""

from __future__ import annotations

from pathlib import Path

import orjson

from pipeline.dataset.exporters import export
from pipeline.dataset.redact import REDACTED, Hosts
from tests.helpers.conversation_runs import make_conversation_run


def test_whole_names_only() -> None:
    hosts = Hosts(["http://c:8000", "a", "gpu-node-7.cluster.internal"])
    text = "license: mit; served by http://c:8000/v1, c:8000, host c. and a; gpu-node-7.cluster.internal a-b abc"
    assert hosts.scrub(text) == (
        f"license: mit; served by {REDACTED}/v1, {REDACTED}, host {REDACTED}. and {REDACTED}; {REDACTED} a-b abc"
    )
    assert hosts.find("a dataset about cats") == "a"  # the word "a" is a host here: reported, as asked
    assert hosts.find("license and language") is None
    assert hosts.find("see c:8000 for details") == "c:8000"


def test_a_card_of_a_run_on_short_host_names_reads_as_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    make_conversation_run(run)
    manifest = orjson.loads((run / "run.json").read_bytes())
    manifest["config"]["endpoints"] = [
        {"url": "http://c:8000", "concurrency": 8},
        {"url": "http://b:1", "concurrency": 8},
    ]
    manifest["config"]["export"] = {"license": "mit", "language": ["en"]}
    (run / "run.json").write_bytes(orjson.dumps(manifest))
    export(run, "chat", tmp_path / "out")
    card = (tmp_path / "out" / "README.md").read_text()
    assert "license: mit" in card and REDACTED not in card
    assert "c:8000" not in card and "b:1" not in card
