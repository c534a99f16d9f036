"""Fault injection on the real local stack: a TCP proxy that can cut a connection silently,
a worker subprocess that can be SIGKILLed, and helpers to watch the servers.

Nothing here mocks ClickHouse or S3: the proxy forwards real native-protocol bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.local import LocalStack

ROOT = Path(__file__).resolve().parents[2]


class BlackholeProxy:
    """Forward 127.0.0.1:<port> to a ClickHouse node until :meth:`cut`.

    ``cut()`` is a network partition as the server sees it: the proxy stops forwarding in
    both directions but keeps its sockets to the server open, so the server does not learn
    that the client is gone (no FIN, no RST) and its query runs on. The client times out
    (``send_receive_timeout``) and gives up.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = int(self._listener.getsockname()[1])
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._held += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.2)
        while not self._closed.is_set():
            if self._cut.is_set():
                time.sleep(0.2)  # hold the sockets open, read nothing, forward nothing
                continue
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                if not self._cut.is_set():
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                return
            if self._cut.is_set():
                continue
            try:
                dst.sendall(data)
            except OSError:
                return

    def cut(self) -> None:
        """Stop forwarding; keep every socket open."""
        self._cut.set()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        for s in self._held:
            with contextlib.suppress(OSError):
                s.close()


def wait_running(stack: LocalStack, query_id: str, timeout: float = 60.0, min_written: int = 1) -> None:
    """Wait until ``query_id`` runs on node 0 and has written at least ``min_written`` rows."""
    client = stack.clickhouse_client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = client.execute("SELECT written_rows FROM system.processes WHERE query_id = %(q)s", {"q": query_id})
        if rows and int(rows[0][0]) >= min_written:
            return
        time.sleep(0.05)
    raise AssertionError(f"query {query_id} did not start writing within {timeout} s")


def wait_gone(stack: LocalStack, query_id: str, timeout: float = 120.0) -> None:
    """Wait until ``query_id`` is no longer in node 0's system.processes."""
    client = stack.clickhouse_client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not client.execute("SELECT 1 FROM system.processes WHERE query_id = %(q)s", {"q": query_id}):
            return
        time.sleep(0.1)
    raise AssertionError(f"query {query_id} still runs after {timeout} s")


def is_running(stack: LocalStack, query_id: str) -> bool:
    client = stack.clickhouse_client()
    return bool(client.execute("SELECT 1 FROM system.processes WHERE query_id = %(q)s", {"q": query_id}))


def outcome(stack: LocalStack, query_id: str) -> str | None:
    """The query's end in node 0's system.query_log: QueryFinish, ExceptionWhileProcessing, … or None."""
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    rows = client.execute(
        "SELECT type, exception_code FROM system.query_log WHERE query_id = %(q)s AND type != 'QueryStart' "
        "ORDER BY event_time_microseconds",
        {"q": query_id},
    )
    return f"{rows[-1][0]}({rows[-1][1]})" if rows else None


def fingerprint(stack: LocalStack, table: str) -> tuple[int, int]:
    """(count(), sum(cityHash64(*))) of a table on node 0."""
    row = stack.clickhouse_client().execute(f"SELECT count(), sum(cityHash64(*)) FROM {table}")[0]
    return int(row[0]), int(row[1])


def partition_counts(stack: LocalStack, table: str) -> dict[int, int]:
    rows = stack.clickhouse_client().execute(
        f"SELECT toYYYYMM(CreationDate) AS p, count() FROM {table} GROUP BY p ORDER BY p"
    )
    return {int(p): int(c) for p, c in rows}


class Reader:
    """A thread that reads the target while a load runs and records every distinct answer."""

    def __init__(self, stack: LocalStack, table: str, per_partition: bool) -> None:
        self.stack, self.table, self.per_partition = stack, table, per_partition
        self.seen: list[Any] = []
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = self.stack.clickhouse_client()
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                if self.per_partition:
                    rows = client.execute(
                        f"SELECT toYYYYMM(CreationDate) AS p, count() FROM {self.table} GROUP BY p ORDER BY p"
                    )
                    value: Any = {int(p): int(c) for p, c in rows}
                else:
                    value = int(client.execute(f"SELECT count() FROM {self.table}")[0][0])
                self.reads += 1
                if not self.seen or self.seen[-1] != value:
                    self.seen.append(value)
            time.sleep(0.01)

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


WORKER = """
import json, sys, types
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
args = json.loads(sys.argv[1])
ti = types.SimpleNamespace(dag_id="it", task_id=args.pop("task_id"), run_id=args.pop("run_id"), map_index=-1,
                           try_number=args.pop("try_number"), xcom_push=lambda key, value: None)
print("worker starts", flush=True)
result = S3ToClickHouseOperator(task_id=ti.task_id, **args).execute({"ti": ti})
print("RESULT " + json.dumps(result, default=str), flush=True)
"""


def start_worker(stack: LocalStack, *, task_id: str, run_id: str, try_number: int, **kwargs: Any) -> subprocess.Popen:
    """Run the operator in a separate Python process (a worker), with the stack's connections."""
    env = dict(os.environ)
    env.update(stack.airflow_env())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    payload = json.dumps({"task_id": task_id, "run_id": run_id, "try_number": try_number, **kwargs})
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, payload], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


class SuffixRangeProxy:
    """An HTTP proxy to the local S3 server that answers suffix ranges (``Range: bytes=-N``) with the
    object's *first* N bytes, as some S3 servers do (s3rver 3.7); every other request passes unchanged.

    :param upstream: the S3 endpoint, ``http://127.0.0.1:PORT``.
    """

    def __init__(self, upstream: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        target = urlsplit(upstream)
        self.suffix_requests = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                import http.client
                import re

                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "host")}
                suffix = re.fullmatch(r"bytes=-(\d+)", headers.get("Range", ""))
                if suffix:
                    proxy.suffix_requests += 1
                    headers["Range"] = f"bytes=0-{int(suffix.group(1)) - 1}"
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def __enter__(self) -> SuffixRangeProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
