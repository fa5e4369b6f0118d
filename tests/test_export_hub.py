"""`--push-to-hub`: the real `huggingface_hub` client uploads an export folder to a fake Hub on 127.0.0.1 (the
endpoints it calls: repo creation, card YAML validation, preupload, commit), never to the real Hub."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.dataset.exporters import export
from pipeline.dataset.hub import push_to_hub
from pipeline.errors import ConfigError
from pipeline.store.manifest import mark_simulated, updating_manifest
from tests.helpers.conversation_runs import make_conversation_run

pytest.importorskip("huggingface_hub")


class FakeHub(BaseHTTPRequestHandler):
    """The Hub's HTTP API as far as creating a dataset repository and committing files to it goes."""

    calls: list[tuple[str, str, dict[str, str], bytes]]
    files: dict[str, bytes]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.calls.append(("POST", self.path, dict(self.headers), body))
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        if self.path == "/api/repos/create":
            payload = json.loads(body)
            return self._send({"url": f"{base}/datasets/{payload['organization']}/{payload['name']}"})
        if self.path == "/api/validate-yaml":
            return self._send({})
        if "/preupload/" in self.path:
            files = json.loads(body)["files"]
            modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
            return self._send({"files": modes})
        if "/commit/" in self.path:
            for line in body.splitlines():
                item = json.loads(line)
                if item["key"] == "file":
                    self.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            return self._send({"commitUrl": f"{base}/datasets/org/name/commit/{'a' * 40}", "commitOid": "a" * 40})
        self._send({"error": "not faked"}, 404)

    def do_GET(self) -> None:
        self.calls.append(("GET", self.path, dict(self.headers), b""))
        self._send({"error": "not faked"}, 404)

    def _send(self, payload: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeHub]]:
    handler = type("Hub", (FakeHub,), {"calls": [], "files": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def _api(hub: type[FakeHub]) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token="hf_test_token")  # type: ignore[attr-defined]


def test_push_creates_the_repository_and_uploads_the_folder(tmp_path: Path, hub: type[FakeHub]) -> None:
    make_conversation_run(tmp_path / "run")
    out = tmp_path / "out"
    export(tmp_path / "run", "chat", out)
    (out / "data" / ".train-00009.parquet.tmp").write_bytes(b"half")  # an interrupted export's leftover
    url = push_to_hub(out, "org/name", private=True, api=_api(hub))
    assert url.endswith("/datasets/org/name")
    create = json.loads(next(body for _, path, _, body in hub.calls if path == "/api/repos/create"))
    assert create == {"name": "name", "organization": "org", "visibility": "private", "type": "dataset"}
    local = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file() and "tmp" not in p.name}
    assert hub.files == local and "README.md" in local and "data/train-00000.parquet" in local
    headers = [h for _, _, h, _ in hub.calls]
    assert all(h.get("authorization", h.get("Authorization")) == "Bearer hf_test_token" for h in headers)


def test_the_cli_pushes_after_exporting(tmp_path: Path, hub: type[FakeHub], capsys: pytest.CaptureFixture) -> None:
    make_conversation_run(tmp_path / "run")
    out = tmp_path / "out"
    argv = ["export", str(tmp_path / "run"), "--format", "specforge", "--out", str(out), "--push-to-hub", "org/n"]
    assert main([*argv, "--license", "mit", "--language", "en"]) == 0
    assert "uploaded to" in capsys.readouterr().out
    assert "data/train-00000.jsonl" in hub.files and b"license: mit" in hub.files["README.md"]


def test_a_simulator_run_is_pushed_only_with_allow_simulated(
    tmp_path: Path, hub: type[FakeHub], capsys: pytest.CaptureFixture
) -> None:
    """Refused (exit 2) before the export is written and before the Hub is called; `--allow-simulated` pushes it,
    and its card says it is the simulator's filler."""
    make_conversation_run(tmp_path / "run")
    with updating_manifest(tmp_path / "run") as manifest:
        mark_simulated(manifest, ["sim"])
    out = tmp_path / "out"
    argv = ["export", str(tmp_path / "run"), "--format", "chat", "--out", str(out), "--push-to-hub", "org/n"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is a simulator run (endpoints sim)" in err and "--allow-simulated" in err
    assert not out.exists() and hub.calls == []
    assert main([*argv, "--allow-simulated"]) == 0
    assert b"**Simulated: not model output.**" in hub.files["README.md"]


class RecordingApi:
    """The seam for huggingface_hub 0.25-1.x, whose resumable upload is `upload_large_folder`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def create_repo(self, repo_id: str, **kwargs: Any) -> str:
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))
        return f"https://hub.example/datasets/{repo_id}"

    def upload_large_folder(self, **kwargs: Any) -> None:
        self.calls.append(("upload_large_folder", kwargs))


def test_upload_large_folder_is_used_where_the_library_has_it(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n")
    api = RecordingApi()
    push_to_hub(tmp_path, "org/name", api=api)
    assert [name for name, _ in api.calls] == ["create_repo", "upload_large_folder"]
    assert api.calls[0][1] == {"repo_id": "org/name", "repo_type": "dataset", "private": False, "exist_ok": True}
    assert api.calls[1][1]["folder_path"] == tmp_path and api.calls[1][1]["repo_type"] == "dataset"


@pytest.mark.parametrize("repo_id", ["name", "a/b/c", "/name"], ids=["no-org", "too-deep", "empty-org"])
def test_repo_id_must_be_org_slash_name(tmp_path: Path, repo_id: str) -> None:
    (tmp_path / "README.md").write_text("")
    with pytest.raises(ConfigError, match="ORG/NAME"):
        push_to_hub(tmp_path, repo_id, api=RecordingApi())


def test_an_unreachable_hub_is_an_output_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.errors import OutputError

    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(OutputError, match="org/name"):
        push_to_hub(tmp_path, "org/name", token="hf_x")
