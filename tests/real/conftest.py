"""The real-server fixtures: one vLLM server per variant for the whole session, started on first use, stopped at the
end (tests/real/vllm_server.py): `vllm_server` with the reasoning parser (`--reasoning-parser qwen3`), and
`vllm_tools_server` with Hermes tool-call parsing as well. Where the environment scripts/real_server.sh builds is
missing, the tests that use them skip saying so, and fail so in CI.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.real.vllm_server import RealEnv, VllmServer, find_env


@pytest.fixture(scope="session")
def real_env() -> RealEnv:
    return find_env()


def _serve(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, env: RealEnv, name: str, *extra: str
) -> Iterator[VllmServer]:
    server = VllmServer(env, tmp_path_factory.mktemp(name) / "vllm.log", extra)
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(f"\n{name}: vLLM up on {server.url} in {server.started_in:.1f} s ({server.log})", flush=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, real_env: RealEnv
) -> Iterator[VllmServer]:
    """`vllm serve MODEL --reasoning-parser qwen3 --max-model-len 4096` on 127.0.0.1, for the session."""
    yield from _serve(request, tmp_path_factory, real_env, "vllm")


@pytest.fixture(scope="session")
def vllm_tools_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, real_env: RealEnv
) -> Iterator[VllmServer]:
    """The same with Hermes tool-call parsing (`--enable-auto-tool-choice --tool-call-parser hermes`): the tiny
    template writes tool calls as Qwen's `<tool_call>` JSON, which that parser reads."""
    yield from _serve(
        request, tmp_path_factory, real_env, "vllm-tools", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"
    )
