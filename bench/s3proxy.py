"""A proxy in front of the local S3 server that behaves more like real object storage.

Moto on loopback answers in well under a millisecond and at memory speed. AWS S3 takes tens of
milliseconds to the first byte of every request and serves one connection at tens of MB/s; that is
where ClickHouse's download buffers, download threads and reading threads earn their keep. The
proxy adds both, per request and per connection:

- ``latency_ms``: a fixed wait before each response's first byte;
- ``bandwidth_mbps``: each connection's body bytes paced to at most this many MB/s (10^6 bytes).

It forwards every request (method, path, query, headers, body) to the upstream server over one
keep-alive connection per client connection, so ClickHouse's and boto3's requests (listing, HEAD,
ranged GETs) go through it unchanged. For benchmarks only: no TLS, the whole response held in memory.

    with S3Proxy("http://127.0.0.1:9000", latency_ms=30, bandwidth_mbps=80) as proxy:
        proxy.url  # give this to ClickHouse and boto3 as the S3 endpoint
"""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

#: Body bytes written per pacing step.
CHUNK = 64 * 1024

#: Headers that belong to one hop, not forwarded.
HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closes its keep-alive connection (ClickHouse does, between reads) is not an error."""
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class S3Proxy:
    """A latency- and bandwidth-shaping HTTP proxy on 127.0.0.1 (a free port), in a background thread.

    :param upstream: the S3 server's URL, ``http://host:port``.
    :param latency_ms: the wait before each response's first byte.
    :param bandwidth_mbps: each connection's body rate, in MB/s; None for no cap.
    """

    def __init__(self, upstream: str, *, latency_ms: float = 30.0, bandwidth_mbps: float | None = 80.0) -> None:
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.latency_s = latency_ms / 1000
        self.rate = bandwidth_mbps * 1e6 if bandwidth_mbps else None
        self.requests = 0
        self.bytes_out = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> S3Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _count(self, n: int) -> None:
        with self._lock:
            self.requests += 1
            self.bytes_out += n

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                return

            def _upstream(self) -> http.client.HTTPConnection:
                conn = getattr(self, "_conn", None)
                if conn is None:
                    conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=600)
                    self._conn = conn
                return conn

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                started = time.monotonic()
                for attempt in (1, 2):  # a keep-alive upstream connection the server closed: open a new one
                    try:
                        conn = self._upstream()
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                        break
                    except (http.client.HTTPException, OSError):
                        self._conn = None
                        if attempt == 2:
                            raise
                wait = proxy.latency_s - (time.monotonic() - started)
                if wait > 0:
                    time.sleep(wait)
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                # A HEAD's answer has no body: its Content-Length is the object's, as S3 gave it.
                size = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", size or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self._paced(data)
                proxy._count(len(data))

            def _paced(self, data: bytes) -> None:
                if proxy.rate is None:
                    self.wfile.write(data)
                    return
                began = time.monotonic()
                for offset in range(0, len(data), CHUNK):
                    self.wfile.write(data[offset:offset + CHUNK])
                    ahead = (offset + CHUNK) / proxy.rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        return Handler
