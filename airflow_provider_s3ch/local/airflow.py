"""Airflow 3's own components (api-server, dag-processor, scheduler, triggerer) as real processes on the
local stack: what ``s3ch-local live`` runs, and the real-scheduler tests.

``airflow dags test`` runs one DAG run in one process; it cannot run an asset watcher, which lives in the
triggerer, nor start runs from asset events, which the scheduler does. Here each component is its own
process in one ``AIRFLOW_HOME`` with a SQLite metadata database and the LocalExecutor.

Each component starts in a session of its own. Its children may leave its process group (the task SDK's
supervisor puts each task process in a group of its own), not its session: :meth:`Airflow.stop` ends every
process of those sessions, and their descendants, before it returns.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import psutil

# the stack's children get the same start: a session of their own, SIGTERM when their parent dies
from airflow_provider_s3ch.local.stack import LocalStack, _die_with_parent, free_port

#: The components that schedule asset-triggered runs and run their watchers and tasks.
COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")

#: The stop signals (Ctrl-C, ``kill``, a closed terminal): held while Airflow starts a component or stops.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held(signals: Iterable[signal.Signals] = STOP_SIGNALS) -> Iterator[None]:
    """Hold the stop signals that arrive in the block, and deliver the first of them (to the handlers in place
    before) once it ends: a handler that raises (Ctrl-C's ``KeyboardInterrupt``, ``s3ch-local``'s ``Stopped``)
    cannot cut a clean-up short. Off the main thread, where no handler runs, it holds nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if caught:
        signal.raise_signal(caught[0])


class Airflow:
    """Airflow's components as real processes in one ``AIRFLOW_HOME``, on the connections of a local stack.

    :param home: the ``AIRFLOW_HOME`` (the metadata database and each component's log are written there).
    :param stack: the local stack whose ``AIRFLOW_CONN_*`` the components get.
    :param extra_env: more environment variables (a DAG's configuration, Airflow settings), applied last.
    :param dags_folder: the DAGs the dag-processor parses.
    :param pythonpath: folders put first on the components' ``PYTHONPATH``.
    """

    def __init__(
        self,
        home: Path,
        stack: LocalStack,
        extra_env: dict[str, str],
        *,
        dags_folder: Path,
        pythonpath: Iterable[str | Path] = (),
    ) -> None:
        self.home = home
        self.api_port = free_port()
        self.env = dict(os.environ)
        self.env.update(stack.airflow_env())
        path = [str(p) for p in pythonpath] + [p for p in (self.env.get("PYTHONPATH"),) if p]
        self.env.update({
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "airflow_provider_s3ch.local.sqlite_db.CONNECT_ARGS",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "airflow_provider_s3ch.local.sqlite_db.CONNECT_ARGS",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
            "PYTHONPATH": os.pathsep.join(path),
            **extra_env,
        })  # fmt: skip
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        #: every component process started, restarts included (a session each)
        self._started: list[subprocess.Popen[bytes]] = []

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """One Airflow CLI command in this home (``airflow db migrate``, ``airflow dags unpause …``)."""
        return subprocess.run([sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip

    def migrate(self) -> None:
        """Create the metadata database (``airflow db migrate``).

        :raises RuntimeError: when the command fails (its output's end in the message).
        """
        out = self.run("db", "migrate")
        if out.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{(out.stdout + out.stderr)[-3000:]}")

    def start(self, *components: str) -> None:
        """Start each component (``airflow <name>``) in a session of its own (it gets SIGTERM if this process
        dies), its output to ``<home>/<name>.log``.

        The stop signals are held until the component is recorded: a handler that raised inside ``Popen``
        would lose a child already forked, which :meth:`stop` would then never end.
        """
        for name in components:
            with signals_held(), open(self.home / f"{name}.log", "wb") as log:
                mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
                try:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "airflow", name], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, preexec_fn=functools.partial(_die_with_parent, os.getpid(), mask),
                    )  # fmt: skip
                    self.procs[name] = proc
                    self._started.append(proc)
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def processes(self) -> list[psutil.Process]:
        """Every live process the components started, the components left out: the members of their sessions
        (a task process sits in a process group of its own, in its component's session) and the descendants of
        each (one that started a session of its own). Zombies count as gone.

        Only the sessions of components not reaped yet are looked at: a reaped leader's number may be reused.
        """
        leaders = {p.pid for p in self._started}
        ours = {p.pid for p in self._started if p.returncode is None}
        sessions = set(ours)
        table: dict[int, psutil.Process] = {}
        children: dict[int, list[int]] = {}
        for proc in psutil.process_iter(["ppid"]):
            try:
                sid = os.getsid(proc.pid)
            except OSError:
                continue
            table[proc.pid] = proc
            children.setdefault(proc.info["ppid"], []).append(proc.pid)
            if sid in sessions:
                ours.add(proc.pid)
        todo = list(ours)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in ours:
                    ours.add(child)
                    todo.append(child)
        return [table[pid] for pid in ours if pid in table and pid not in leaders and _alive(table[pid])]

    def stop(self, grace: float = 30) -> None:
        """Stop every component and every process they started: SIGTERM to each (each component's process group,
        each process of :meth:`processes`), SIGKILL to those still running ``grace`` seconds later; returns once
        all are gone. Stop signals that arrive meanwhile are held until then (:func:`signals_held`). Safe to call
        twice, and on components never started."""
        with signals_held():
            self._signal_all(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self._running():
                time.sleep(0.2)
            for _ in range(3):  # and whatever a dying process started meanwhile
                if not self._running():
                    break
                self._signal_all(signal.SIGKILL)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and self._running():
                    time.sleep(0.1)
            for proc in self._started:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)

    def _running(self) -> bool:
        return any(_leader_running(p) for p in self._started) or bool(self.processes())

    def _signal_all(self, signum: signal.Signals) -> None:
        others = self.processes()
        for proc in self._started:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signum)
        for other in others:
            with contextlib.suppress(psutil.Error):
                other.send_signal(signum)

    def exited(self) -> dict[str, int]:
        """The components that ended, with their exit status."""
        return {name: rc for name, proc in self.procs.items() if (rc := proc.poll()) is not None}

    def log(self, name: str, chars: int = 4000) -> str:
        """The end of one component's log."""
        return (self.home / f"{name}.log").read_text(errors="replace")[-chars:]

    def db(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of one statement on the metadata database."""
        with sqlite3.connect(self.home / "airflow.db", timeout=30) as conn:
            return conn.execute(sql, params).fetchall()


def _leader_running(proc: subprocess.Popen[bytes]) -> bool:
    """A component still running (not reaped, not a zombie: its number stays ours until it is reaped)."""
    try:
        return proc.returncode is None and _alive(psutil.Process(proc.pid))
    except psutil.Error:
        return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for(what: str, check: Callable[[], Any], timeout: float, airflow: Airflow, interval: float = 1.0) -> Any:
    """``check()``'s first truthy value, asked every ``interval`` seconds.

    :raises AssertionError: after ``timeout`` seconds, naming ``what``, with the end of each component's log.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    logs = "\n".join(f"--- {n}\n{airflow.log(n)}" for n in airflow.procs)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")
