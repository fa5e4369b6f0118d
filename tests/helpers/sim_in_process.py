"""`run`: the simulator served in this process on 127.0.0.1 (`pipeline.sim.serve`), a check run against it with a
real HTTP client, then the server stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx

from pipeline.sim import SimConfig, serve

Check = Callable[[httpx.AsyncClient], Awaitable[None]]


def run(config: SimConfig, check: Check) -> None:
    async def main() -> None:
        async with serve(config) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            await check(client)

    asyncio.run(main())
