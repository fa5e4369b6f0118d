"""Endpoint membership for one run: which servers the pool holds, and how that changes while the run goes.

At start the fleet opens every endpoint the config lists, or those of `endpoints_file` when one is set: one HTTP
client each, closed when the run ends, and a `url = "sim"` endpoint served by the embedded simulator for as long.
The simulator is not imported here: the composition root (the CLI, the public API) hands it in as `simulator`. The
fleet then builds the `Pool` on them. While the run goes it re-reads `endpoints_file` when it changes: a new URL
joins the pool, a URL no longer listed drains (its requests in flight finish, it takes no new ones), and a drained
URL listed again is probed, then used. Membership is the fleet's; choosing among the members is the pool's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

from ..config import SIM_URL, Config, EndpointConfig, api_key_for, read_endpoints_file
from ..errors import ConfigError, RegenError
from .autosize import capacity_of
from .client import EndpointClient
from .pool import Pool
from .state import DRAINING, EndpointState
from .transport import proxy_for, shown

log = logging.getLogger("regen.run")  # the proxy warning is the run's, as it was when the runner said it

FILE_POLL_S = 1.0  # how often the endpoints file's mtime is looked at

StartSimulator = Callable[[Sequence[str]], AbstractAsyncContextManager[str]]
"""Serve the embedded simulator with these `sim_args` (`regen sim` flags) for as long as the context lasts; the
context yields its base URL. Raises SimStartupError (`pipeline.sglang.resolution.StartupRefused`) when SGLang would
refuse the flags. The composition roots pass `pipeline.sim.embedded`."""

NO_SIMULATOR = (
    'an endpoint says url = "sim", but the embedded simulator was not supplied: `regen`, pipeline.run, '
    "pipeline.preflight and regen.api start it (pass simulator=pipeline.sim.embedded)"
)


class Fleet:
    """The run's endpoints: opened at start (`opened`), changed mid-run by the endpoints file (`watch`, `apply`)."""

    def __init__(
        self, cfg: Config, *, simulator: StartSimulator | None = None, on_event: Callable[[str], None] | None = None
    ):
        self.cfg = cfg
        self.simulator = simulator
        self.on_event = on_event or (lambda message: None)
        self.pool: Pool | None = None
        # Endpoints known to be regen's simulator, URL -> the name run.json's `simulated_endpoints` lists ("sim" for
        # the embedded one, whose URL is a port of the moment; its URL for a `regen sim` found by preflight).
        self.simulated: dict[str, str] = {}
        self._stack: AsyncExitStack | None = None

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[Pool]:
        """Open every configured endpoint, in order, and yield the pool on them; close them all on the way out."""
        async with AsyncExitStack() as stack:
            self._stack = stack
            configured = self.cfg.endpoints
            if self.cfg.endpoints_file:
                configured = read_endpoints_file(self.cfg.endpoints_file)
            states = []
            for ep in configured:
                states.append(await self._open(await self._base_url(ep), ep))
            c = self.cfg.client
            self.pool = Pool(
                states,
                max_cooldown_s=c.backoff_max_s,
                no_endpoint_timeout_s=c.no_endpoint_timeout_s,
                prefer_wait_s=c.sticky_wait_s,
            )
            yield self.pool

    async def _base_url(self, ep: EndpointConfig) -> str:
        """The endpoint's base URL; `sim` starts the embedded simulator for the length of the run."""
        if ep.url != SIM_URL:
            return ep.url
        if self.simulator is None:
            raise ConfigError(NO_SIMULATOR)
        assert self._stack is not None
        return await self._stack.enter_async_context(self.simulator(ep.sim_args))

    async def _open(self, url: str, ep: EndpointConfig) -> EndpointState:
        assert self._stack is not None
        if ep.url == SIM_URL:
            self.simulated[url] = SIM_URL
        proxy = proxy_for(url)
        if proxy:  # followed, as curl and httpx do; said, because a cluster's proxy is rarely meant for its GPUs
            log.warning(
                "%s: requests (and preflight) go through the proxy %s, from HTTP_PROXY/HTTPS_PROXY; add the host to "
                "NO_PROXY to reach it directly",
                url,
                shown(proxy),
            )
        client = EndpointClient(
            url,
            gen=self.cfg.generation,
            client=self.cfg.client,
            concurrency=ep.concurrency,
            api_key=api_key_for(ep.api_key_env, "api_key_env"),
            honor_overrides=self.cfg.input.request_overrides,
        )
        await self._stack.enter_async_context(client)
        capacity, auto = capacity_of(ep)
        return EndpointState(
            client=client,
            capacity=capacity,
            rps=ep.requests_per_second,
            api_key_env=ep.api_key_env,
            auto_capacity=auto,
            capacity_source="automatic" if auto else "config",
        )

    async def watch(self) -> None:
        """Re-read `endpoints_file` when it changes: new URLs join the pool, removed ones drain."""
        if not self.cfg.endpoints_file:
            return
        assert self.pool is not None
        path = Path(self.cfg.endpoints_file)
        seen: float | None = None
        while True:
            await asyncio.sleep(FILE_POLL_S)
            try:
                mtime = (await asyncio.to_thread(path.stat)).st_mtime
            except OSError:
                continue
            if mtime == seen:
                continue
            seen = mtime
            try:
                listed = await asyncio.to_thread(read_endpoints_file, path)
                wanted = {ep.url.rstrip("/"): ep for ep in listed}
            except (OSError, RegenError) as exc:
                self.on_event(f"{path}: {exc}")
                continue
            await self.apply(wanted)

    async def apply(self, wanted: dict[str, EndpointConfig]) -> None:
        """Make the pool's members the `wanted` URLs: drain the others, probe drained ones listed again, open new
        ones."""
        assert self.pool is not None and self._stack is not None
        current = {ep.url: ep for ep in self.pool.endpoints}
        for url, ep in current.items():
            if url not in wanted and ep.state != DRAINING:
                self.pool.drain(ep)
                self.on_event(f"{url}: removed from the endpoints file, draining")
        for url, epcfg in wanted.items():
            if url in current and current[url].state != DRAINING:
                continue
            if url in current:  # it came back: probe it, then use it again
                self.pool.undrain(current[url])
                continue
            self.pool.add(await self._open(url, epcfg))
        await self.pool.notify()
