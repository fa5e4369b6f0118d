"""The simulator is never a silent default (issue 36): a config without endpoints does not run, and a run of the
simulator, embedded (`url = "sim"`) or a `regen sim` server, says so in run.json, status, inspect and the card.

The real CLI as a subprocess against simulators over HTTP on 127.0.0.1. The server that is not the simulator is a
simulator behind a proxy that answers 404 to its own `/_sim/` routes, as SGLang does: everything else is the same.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiohttp import ClientSession, web

from pipeline.config import load_config
from tests.helpers import SIM_FLAGS, write_config, write_prompts
from tests.helpers.processes import regen

NO_ENDPOINTS = "no [[endpoints]]: add one with the server's url"
EMBEDDED = "sim_args = [" + ", ".join(f'"{flag}"' for flag in SIM_FLAGS) + "]"  # `url = "sim"` serving the model
SIM_LINE = "SIMULATED: the simulator"


def _config_without_endpoints(tmp_path: Path) -> Path:
    write_prompts(tmp_path / "prompts.jsonl", n=10)
    cfg = tmp_path / "job.toml"
    text = write_config(tmp_path, "sim").read_text()
    cfg.write_text(text.replace('[[endpoints]]\nurl = "sim"\nconcurrency = 16\n', ""))
    assert "[[endpoints]]" not in cfg.read_text()
    return cfg


def _manifest(run_dir: Path) -> dict:
    return dict(orjson.loads((run_dir / "run.json").read_bytes()))


class HidingProxy:
    """An SGLang-shaped server that is not the simulator: every request goes through to a simulator, streamed,
    except the simulator's own `/_sim/` routes, which answer 404 as on a real server."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(self._app())
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        return app

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/_sim/"):
            return web.json_response({"detail": "Not Found"}, status=404)
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization")}
        async with (
            ClientSession() as http,
            http.request(
                request.method, self.upstream + request.path_qs, data=await request.read(), headers=headers
            ) as up,
        ):
            reply = web.StreamResponse(status=up.status)
            reply.content_type = up.content_type
            await reply.prepare(request)
            async for chunk in up.content.iter_any():
                await reply.write(chunk)
            await reply.write_eof()
            return reply

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def proxy(sim) -> Iterator[HidingProxy]:
    server = HidingProxy(sim(*SIM_FLAGS).url)
    yield server
    server.stop()


# ---------------------------------------------------------------- no endpoints


@pytest.mark.parametrize("command", ["run", "preflight"])
def test_no_endpoints_stops_run_and_preflight_before_anything(tmp_path: Path, command: str) -> None:
    cfg = _config_without_endpoints(tmp_path)
    result = regen(command, str(cfg), "--no-progress" if command == "run" else "--no-probe")
    assert result.returncode == 2, result.stderr
    assert f"{cfg}: {NO_ENDPOINTS}" in result.stderr and 'url = "sim" for the embedded simulator' in result.stderr
    assert not (tmp_path / "run").exists()  # nothing written, no simulator started in its place


def test_endpoint_flag_gives_a_config_without_endpoints_its_server(tmp_path: Path, sim) -> None:
    """--endpoint still supplies the servers; a `regen sim` server is recognised and the run marked with its URL."""
    server = sim(*SIM_FLAGS)
    cfg = _config_without_endpoints(tmp_path)
    checked = regen("preflight", str(cfg), "--endpoint", server.url, "--json")
    assert checked.returncode == 0, checked.stdout
    assert orjson.loads(checked.stdout)["endpoints"][0]["info"]["simulator"] is True
    assert "SIMULATOR" in regen("preflight", str(cfg), "--endpoint", server.url).stdout.splitlines()[0]
    result = regen("run", str(cfg), "--endpoint", server.url, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert f"endpoint {server.url} is regen's simulator" in result.stderr
    man = _manifest(tmp_path / "run")
    assert (man["simulated"], man["simulated_endpoints"]) == (True, [server.url])


def test_commands_that_send_nothing_read_a_config_without_endpoints(tmp_path: Path) -> None:
    cfg = _config_without_endpoints(tmp_path)
    assert load_config(cfg).endpoints == ()
    launch = regen("launch", str(cfg), "--dry-run")
    assert launch.returncode == 0, launch.stderr
    audit = regen("audit", str(tmp_path / "prompts.jsonl"), "--config", str(cfg), "--json")
    assert audit.returncode in (0, 1) and NO_ENDPOINTS not in audit.stderr, audit.stderr  # 1: rows without answers


# ---------------------------------------------------------------- a simulator run says so


def test_an_embedded_simulator_run_is_marked_in_every_report(tmp_path: Path) -> None:
    write_prompts(tmp_path / "prompts.jsonl", n=12)
    run_dir = tmp_path / "run"
    result = regen("run", str(write_config(tmp_path, "sim", EMBEDDED)), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "endpoint sim is regen's simulator: its completions are filler text" in result.stderr
    man = _manifest(run_dir)
    assert (man["simulated"], man["simulated_endpoints"]) == (True, ["sim"])

    status = orjson.loads(regen("status", str(run_dir), "--json").stdout)
    assert (status["simulated"], status["simulated_endpoints"]) == (True, ["sim"])
    assert f"{SIM_LINE} (sim) served this run" in regen("status", str(run_dir)).stdout
    report = orjson.loads(regen("inspect", str(run_dir), "--json").stdout)
    assert (report["simulated"], report["simulated_endpoints"]) == (True, ["sim"])
    assert SIM_LINE in regen("inspect", str(run_dir)).stdout
    page = tmp_path / "report.html"
    assert regen("inspect", str(run_dir), "--html", str(page)).returncode == 0
    assert f'<p class="warn">{SIM_LINE}' in page.read_text()

    out = tmp_path / "export"
    assert regen("export", str(run_dir), "--format", "chat", "--out", str(out)).returncode == 0
    card = (out / "README.md").read_text()
    assert "**Simulated: not model output.**" in card and "- simulated\n" in card


def test_push_to_hub_refuses_a_simulator_run_before_exporting(tmp_path: Path) -> None:
    write_prompts(tmp_path / "prompts.jsonl", n=4)
    run_dir = tmp_path / "run"
    assert regen("run", str(write_config(tmp_path, "sim", EMBEDDED)), "--no-progress").returncode == 0
    out = tmp_path / "export"
    # HF_ENDPOINT points nowhere: a refusal that came too late would show as an upload failure instead
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": "hf_unused"}
    result = regen("export", str(run_dir), "--format", "chat", "--out", str(out), "--push-to-hub", "org/x", env=env)
    assert result.returncode == 2, result.stderr
    assert "simulator run" in result.stderr and "--allow-simulated" in result.stderr
    assert not out.exists()


def test_a_resume_against_a_real_server_keeps_the_mark(tmp_path: Path, proxy: HidingProxy) -> None:
    ids = write_prompts(tmp_path / "prompts.jsonl", n=20)
    cfg = write_config(tmp_path, "sim", EMBEDDED)
    assert regen("run", str(cfg), "--limit", "5", "--no-progress").returncode == 0
    result = regen("run", str(cfg), "--endpoint", proxy.url, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "is regen's simulator" not in result.stderr  # the proxy is not one
    status = orjson.loads(regen("status", str(tmp_path / "run"), "--json").stdout)
    assert status["done"] == len(ids)
    assert (status["simulated"], status["simulated_endpoints"]) == (True, ["sim"])  # its first 5 rows are filler


def test_a_run_of_a_server_that_is_not_the_simulator_is_not_marked(tmp_path: Path, proxy: HidingProxy) -> None:
    write_prompts(tmp_path / "prompts.jsonl", n=8)
    run_dir = tmp_path / "run"
    checked = regen("preflight", str(write_config(tmp_path, proxy.url)), "--json")
    assert orjson.loads(checked.stdout)["endpoints"][0]["info"]["simulator"] is False, checked.stdout
    result = regen("run", str(write_config(tmp_path, proxy.url)), "--no-progress")
    assert result.returncode == 0, result.stderr
    man = _manifest(run_dir)
    assert (man["simulated"], man["simulated_endpoints"]) == (False, [])
    status = regen("status", str(run_dir), "--json")
    assert orjson.loads(status.stdout)["simulated"] is False
    assert SIM_LINE not in regen("inspect", str(run_dir)).stdout
    out = tmp_path / "export"
    assert regen("export", str(run_dir), "--format", "chat", "--out", str(out)).returncode == 0
    assert "Simulated" not in (out / "README.md").read_text()
