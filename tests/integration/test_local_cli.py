"""``s3ch-local up`` as a real process: a stop signal ends every process it started and removes its data."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
READY = "# Ctrl-C stops the stack"


class Up:
    """``s3ch-local up`` running in its own session, with its output read line by line."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        env = dict(os.environ)
        env["TMPDIR"] = str(tmp)  # the stack's temporary directory goes here
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_s3ch.local.cli", "up", "--rows", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, prefix: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting {prefix!r}; output so far:\n" + "\n".join(self.lines))

    def rest(self, timeout: float = 5.0) -> list[str]:
        """The lines after the process ended."""
        out = []
        while (line := self._queue.get(timeout=timeout)) is not None:
            out.append(line)
        return out

    def kill_all(self) -> None:
        """After a failed test: leave nothing running (also a node that outlived the command)."""
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                child.kill()
        for p in psutil.process_iter(["cmdline"]):
            if str(self.tmp) in " ".join(p.info["cmdline"] or []):
                with contextlib.suppress(psutil.Error):
                    p.kill()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    process = Up(tmp_path)
    try:
        yield process
    finally:
        process.kill_all()


def _alive(procs: list[psutil.Process]) -> list[str]:
    """The processes of ``procs`` that still run (the same process: psutil checks its start time)."""
    alive = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {' '.join(p.cmdline())}")
    return alive


def _using(path: Path) -> list[str]:
    """Running processes whose command line names ``path``."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if str(path) in cmdline and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{p.info['pid']} {cmdline}")
    return found


def _serving(up: Up) -> tuple[Path, dict]:
    """Wait until ``up`` serves; prove it with a table on the node; return its data directory and connection."""
    up.wait_for(READY, timeout=180)  # the stack waits up to 90 s for each server
    workdir = Path(next(line for line in up.lines if line.startswith("# data: ")).split()[2])
    exports = [line.removeprefix("export ").split("=", 1) for line in up.lines if line.startswith("export ")]
    conns = [json.loads(shlex.split(value)[0]) for name, value in exports if name.startswith("AIRFLOW_CONN_")]
    conn = next(c for c in conns if c["conn_type"].startswith("clickhouse"))
    from clickhouse_driver import Client

    ch = Client(conn["host"], port=conn["port"], user=conn["login"], password=conn["password"])
    ch.execute("CREATE TABLE default.kept (n UInt64) ENGINE = MergeTree ORDER BY n")
    ch.execute("INSERT INTO default.kept SELECT number FROM numbers(1000)")
    assert ch.execute("SELECT count() FROM default.kept")[0][0] == 1000
    ch.disconnect()
    return workdir, conn


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_ends_every_process_and_removes_the_data(tmp_path: Path, up: Up, signum: signal.Signals) -> None:
    workdir, _ = _serving(up)
    assert workdir.parent == tmp_path and workdir.name.startswith("s3ch-local-")
    assert list(workdir.rglob("kept.sql")), "the node's table is on disk in the data directory while it serves"
    children = psutil.Process(up.proc.pid).children(recursive=True)
    assert len(children) >= 2, "one ClickHouse node and the S3 server"
    assert _using(workdir), "the node runs from the data directory"

    t0 = time.monotonic()
    up.proc.send_signal(signum)
    assert up.proc.wait(timeout=120) == 0
    stopped_in = time.monotonic() - t0

    assert _alive(children) == []
    assert _using(workdir) == []
    assert not workdir.exists()
    assert list(tmp_path.iterdir()) == [], "nothing the stack created stays behind"
    assert any(line.startswith(f"# {signum.name}: stopped") for line in up.rest())
    # The stack SIGTERMs each process and SIGKILLs one still there after 10 s: one node and the S3 server stop
    # within ~20 s even when they do not shut down (a few seconds on a quiet machine; a busy one is slower).
    assert stopped_in < 45, stopped_in


def test_a_signal_during_start_up_also_cleans_up(tmp_path: Path, up: Up) -> None:
    # Signal as soon as the first node has its directory: the stack is still starting.
    deadline = time.monotonic() + 180
    while not list(tmp_path.glob("s3ch-local-*/node0/config.xml")):
        assert time.monotonic() < deadline and up.proc.poll() is None, "the stack did not start"
        time.sleep(0.02)
    workdir = next(tmp_path.glob("s3ch-local-*"))
    children = psutil.Process(up.proc.pid).children(recursive=True)
    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(timeout=120) == 0

    assert _alive(children) == []
    assert _using(workdir) == []
    assert not workdir.exists()
    assert list(tmp_path.iterdir()) == []
