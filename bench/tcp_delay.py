"""A TCP proxy that delays every byte by a one-way latency, each way: a server across a network.

The local ClickHouse answers on loopback in a fraction of a millisecond; a server in another zone or
region is 1-50 ms of round trip away, and every statement a task sends pays it at least once. The proxy
forwards the native protocol unchanged and holds each chunk it reads for ``rtt_ms / 2`` before it writes
it on (in order; no bandwidth cap), so a request and its answer take one ``rtt_ms`` more.

    with TcpDelay(("127.0.0.1", 9000), rtt_ms=10) as proxy:
        proxy.port  # give this to the client as the server's port
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any


class TcpDelay:
    """A delaying TCP proxy on 127.0.0.1 (a free port), in a background thread with its own event loop.

    :param upstream: the server's (host, port).
    :param rtt_ms: the round trip it adds (half each way).
    """

    def __init__(self, upstream: tuple[str, int], *, rtt_ms: float) -> None:
        self.upstream = upstream
        self.one_way_s = rtt_ms / 2000
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-delay", daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def __enter__(self) -> TcpDelay:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the delaying proxy did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read chunks as they come; write each one ``one_way_s`` after it was read, in order; pass the end on."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        delivering = asyncio.ensure_future(deliver())
        try:
            while data := await reader.read(1 << 16):
                queue.put_nowait((time.monotonic() + self.one_way_s, data))
        finally:
            queue.put_nowait((0.0, b""))
            with contextlib.suppress(Exception):  # the other side went away: nothing left to pass on
                await delivering

def main() -> None:
    """``python -m bench.tcp_delay HOST:PORT RTT_MS``: serve until killed (apart from the process it measures,
    so the two share no interpreter lock); prints the proxy's port first."""
    import sys

    host, port = sys.argv[1].rsplit(":", 1)
    with TcpDelay((host, int(port)), rtt_ms=float(sys.argv[2])) as proxy:
        print(proxy.port, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
