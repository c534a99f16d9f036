"""Airflow 3's own components (api-server, dag-processor, scheduler, triggerer) as real processes on the
local stack: what ``s3ch-local live`` runs, and the real-scheduler tests.

``airflow dags test`` runs one DAG run in one process; it cannot run an asset watcher, which lives in the
triggerer, nor start runs from asset events, which the scheduler does. Here each component is its own
process in one ``AIRFLOW_HOME`` with a SQLite metadata database and the LocalExecutor.
"""

from __future__ import annotations

import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.local.stack import LocalStack, free_port

#: The components that schedule asset-triggered runs and run their watchers and tasks.
COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")


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
        """Start each component (``airflow <name>``) in its own process group, its output to ``<home>/<name>.log``."""
        for name in components:
            log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", name], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def stop(self, grace: float = 30) -> None:
        """SIGTERM every component's process group, SIGKILL those still running ``grace`` seconds later."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

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
