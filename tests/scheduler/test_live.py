"""``s3ch-local live`` briefly, through Airflow's own api-server, dag-processor, scheduler and triggerer on the
continuous example DAG: every file put reaches the table once, and the summary names the figures; stopped by a
signal at any phase, it leaves none of its processes behind."""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.airflow import COMPONENTS
from airflow_provider_s3ch.local.cli import main
from airflow_provider_s3ch.local.live import COLUMNS, LiveOptions, run_live
from bench.continuous_scenarios import IDLE, LATE, Scenarios, outcome

ROOT = Path(__file__).resolve().parents[2]
TABLE = "default.live_events"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as s:
        yield s


def test_live_puts_files_and_each_reaches_the_table_once(stack: LocalStack, tmp_path: Path) -> None:
    """Beside the feed's files, the fault scenarios of the S3Queue comparison in small (bench/continuous_scenarios.py):
    a file with a row that cannot be parsed, a loaded key put again with new bytes, late keys sorting before the
    others, and a file of 1,000,000 rows with the ClickHouse node SIGKILLed while the insert reads it."""
    lines: list[str] = []
    options = LiveOptions(dag_file=ROOT / "example_dags" / "example_continuous.py", table=TABLE, seconds=15,
                          rows_per_file=50, report_every=3, drain_timeout=240)  # fmt: skip
    hook = Scenarios(stack, options, 1_000_000, lines.append, at={"bad": 2, "reupload": 4, "late": 6, "big": 8})
    result = run_live(stack, options, home=tmp_path, say=lines.append, faults=hook)
    out = "\n".join(lines)
    print(out)

    assert result.put == 15
    # What the table holds, read here, not taken from the command: each file's 50 rows once, no other rows.
    per_file = stack.clickhouse_client().execute(f"SELECT file, count(), uniqExact(id) FROM {TABLE} WHERE file < "
                                                 f"{IDLE} GROUP BY file ORDER BY file")  # fmt: skip
    assert per_file == [(n, 50, 50) for n in range(1, 16)]
    scenarios = outcome(stack, dataclasses.replace(options, files=15), hook, result)
    assert scenarios["ok"], scenarios
    assert result.exactly_once and result.loaded == 15 and len(result.latencies) == 15
    assert result.runs and all(kind.endswith("/success") for kind in result.runs), result.runs
    assert result.inserts >= 1
    # The progress lines and the summary, with their figures.
    assert "files put   15  loaded   15  lag   0.0 s" in out
    assert "files put: 15, loaded: 15, rows: 750 (50 per file); each file exactly once: yes" in out
    assert f"p50 {result.percentile(50):.1f} s, p95 {result.percentile(95):.1f} s" in out
    assert f"inserts from S3: {result.inserts}" in out
    # The ledger: one loaded row per file.
    ledger = stack.clickhouse_client().execute(
        "SELECT countIf(state = 'loaded'), uniqExactIf(key, state = 'loaded') FROM default._s3ch_ledger FINAL "
        "WHERE table = %(t)s",
        {"t": TABLE})  # fmt: skip
    assert ledger == [(15 + 1 + len(LATE), 15 + 1 + len(LATE))]  # the feed's, the large file, the late keys


def test_the_command_refuses_a_missing_dag_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["live", "--dag-file", str(tmp_path / "nothing.py")]) == 2
    assert "no DAG file at" in capsys.readouterr().err


class Live:
    """``s3ch-local live`` as a child process: its lines as they come, and every process under it, recorded while it
    runs (each component, its children, the task processes, the stack's servers)."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_s3ch.local.cli", "live",
             "--dag-file", str(ROOT / "example_dags" / "example_continuous.py"), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
        )  # fmt: skip
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.seen: dict[int, psutil.Process] = {}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def record(self) -> list[psutil.Process]:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for child in children:
            self.seen.setdefault(child.pid, child)
        return children

    def until(self, what: str, check: Callable[[str | None], bool], timeout: float) -> None:
        """Read lines (and record processes every 0.1 s) until ``check`` holds, on a line or, with None, between."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.record()
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                line = None
            else:
                if line is None:
                    pytest.fail(f"the command ended before {what}:\n" + "\n".join(self.lines))
                self.lines.append(line)
            if check(line):
                return
        pytest.fail(f"timed out waiting for {what}:\n" + "\n".join(self.lines))

    def signal(self, signum: signal.Signals = signal.SIGINT, timeout: float = 240) -> int:
        """Send ``signum``; the exit status, once the command has ended (and its output is read)."""
        self.record()
        self.proc.send_signal(signum)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running {timeout:g} s after {signum.name}:\n" + "\n".join(self.lines))
        while (line := self._queue.get(timeout=30)) is not None:
            self.lines.append(line)
        return rc

    def left(self) -> list[str]:
        """The processes seen under it that still run (zombies count as gone)."""
        out = []
        for proc in self.seen.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{proc.pid} {' '.join(proc.cmdline())[:150]}")
            except psutil.Error:
                continue
        return out

    def end(self) -> None:
        """Whatever still runs (a failed run's orphans): killed, so that a failure leaves nothing behind either."""
        if self.proc.poll() is None:
            self.proc.kill()
        for proc in self.seen.values():
            try:
                proc.kill()
            except psutil.Error:
                continue
        self.proc.wait(timeout=30)


def _components(live: Live) -> set[str]:
    """The Airflow components the command runs now (its children ``python -m airflow <name>``)."""
    live.record()
    names = set()
    try:
        children = psutil.Process(live.proc.pid).children()
    except psutil.Error:
        return names
    for proc in children:
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        names.update(n for n in COMPONENTS if re.search(rf"\bairflow {n.replace('-', '[-_]')}\b", cmd))
    return names


def _loaded(line: str | None) -> bool:
    return bool(line and (m := re.search(r"\bloaded +(\d+) +lag", line)) and int(m[1]) > 0)


def test_a_stop_signal_at_any_phase_stops_every_process_it_started() -> None:
    """SIGINT while the stack starts, while Airflow starts, while files are put (after the first loads: task
    processes ran), while the last ones are waited for: each time every process seen under the command is gone once
    it has exited, and it says so only then; stopped while files are put or waited for, its summary says which files
    are not loaded yet (not that they are missing or doubled)."""
    started = time.monotonic()
    timings = {}
    phases: list[tuple[str, tuple[str, ...], Callable[[Live], None]]] = []

    def stack_starting(live: Live) -> None:
        live.until("the stack to start", lambda line: bool(line and line.startswith("starting the stack")), 120)
        live.until("the stack's first process", lambda line: bool(live.seen), 60)
        assert not any(line.startswith("starting Airflow") for line in live.lines), live.lines

    def airflow_starting(live: Live) -> None:
        live.until("Airflow to start", lambda line: bool(line and line.startswith("starting Airflow")), 120)
        live.until("Airflow's four components", lambda line: _components(live) == set(COMPONENTS), 180)
        begun = time.monotonic()  # a few seconds more: the components start their own children
        live.until("a few seconds", lambda line: time.monotonic() - begun > 5, 10)
        assert not any(line.startswith("Airflow is up") for line in live.lines), live.lines

    def putting(live: Live) -> None:
        live.until("the first file loaded", _loaded, 420)
        assert not any(line.startswith("all ") for line in live.lines), live.lines

    def draining(live: Live) -> None:
        live.until("the last put", lambda line: bool(line and re.match(r"all \d+ files put; waiting", line)), 420)

    phases = [
        ("stack start", ("--seconds", "5"), stack_starting),
        ("Airflow start", ("--seconds", "5"), airflow_starting),
        ("putting", ("--seconds", "120"), putting),
        ("draining", ("--seconds", "4"), draining),
    ]
    for phase, args, reach in phases:
        t0 = time.monotonic()
        live = Live(*args)
        try:
            reach(live)
            rc = live.signal(signal.SIGINT)
            out = "\n".join(live.lines)
            assert rc == 128 + signal.SIGINT, f"{phase}: exit status {rc}\n{out}"
            assert live.left() == [], f"{phase}: left running:\n" + "\n".join(live.left()) + f"\n{out}"
            assert live.lines[-1] == "# SIGINT: stopped every process it started (Airflow's, ClickHouse, S3)", out
            if phase in ("putting", "draining"):
                progress = [i for i, line in enumerate(live.lines) if re.match(r" +\d+ s +rows ", line)]
                assert live.lines.index(COLUMNS) < min(progress, default=len(live.lines)), out
                assert "SIGINT: no more files; the figures so far" in out, out
                assert re.search(r"each file loaded so far exactly once: yes; not loaded yet: \d+ \(the run was "
                                 r"stopped \(SIGINT\) before their rows were in\)", out), out  # fmt: skip
                assert "NO (" not in out, out
            assert len(live.seen) >= {"stack start": 1, "Airflow start": 6}.get(phase, 8), (phase, live.seen)
        finally:
            live.end()
        timings[phase] = f"{time.monotonic() - t0:.0f} s, {len(live.seen)} processes"
        print(f"--- {phase}: {timings[phase]}\n{out}")
    print(f"phases ({time.monotonic() - started:.0f} s in all): {timings}")
