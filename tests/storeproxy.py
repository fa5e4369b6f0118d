"""A TCP proxy on 127.0.0.1 in front of a server (the local S3 server), which can drop every connection for a while:
an object-store outage as a client sees one (connections reset at once, new ones closed on accept), with raw
asyncio sockets in a thread of its own so a test drives it from the outside.

    with StoreProxy(target_host, target_port) as proxy:
        env["AWS_ENDPOINT_URL"] = proxy.url
        proxy.drop_for(12.0)       # from now: every connection dropped for 12 s
        proxy.dropped              # connections dropped so far
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from types import TracebackType


class StoreProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.dropped = 0
        self.forwarded = 0
        self._until = 0.0  # time.monotonic() before which connections are dropped
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="store-proxy", daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def dropping(self) -> bool:
        return time.monotonic() < self._until

    def drop_for(self, seconds: float) -> None:
        """Drop every open connection now and every new one for `seconds`."""
        self._until = time.monotonic() + seconds
        self._loop.call_soon_threadsafe(self._reset_all)

    def __enter__(self) -> StoreProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # -- the proxy's own thread ------------------------------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.close()

    def _reset_all(self) -> None:
        for writer in list(self._writers):
            self._reset(writer)

    def _reset(self, writer: asyncio.StreamWriter) -> None:
        self.dropped += 1
        self._writers.discard(writer)
        transport = writer.transport
        if isinstance(transport, asyncio.Transport):
            transport.abort()  # RST, not a clean close: what a store going away looks like

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.dropping:
            self._reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self._reset(writer)
            return
        self.forwarded += 1
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.write_eof()
