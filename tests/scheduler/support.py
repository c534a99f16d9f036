"""Airflow's real components as processes, for the tests that go through the real scheduler."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.stack import free_port

ROOT = Path(__file__).resolve().parents[2]
DAGS = Path(__file__).parent / "dags"


class Airflow:
    """Airflow's components as real processes in one AIRFLOW_HOME."""

    def __init__(self, home: Path, stack: LocalStack, extra_env: dict[str, str]) -> None:
        self.home = home
        self.api_port = free_port()
        self.env = dict(os.environ)
        self.env.update(stack.airflow_env())
        self.env.update({
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "tests.scheduler.sqlite_db.CONNECT_ARGS",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "tests.scheduler.sqlite_db.CONNECT_ARGS",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "s3ch-scheduler-test-secret",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), self.env.get("PYTHONPATH")) if p),
            **extra_env,
        })  # fmt: skip
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip

    def start(self, *components: str) -> None:
        for name in components:
            log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", name], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")[-4000:]

    def db(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.home / "airflow.db", timeout=30) as conn:
            return conn.execute(sql, params).fetchall()

    def task_processes(self) -> list[psutil.Process]:
        """The processes that run tasks: forked by the LocalExecutor's workers (the scheduler's children)."""
        scheduler = psutil.Process(self.procs["scheduler"].pid)
        out = []
        for worker in scheduler.children():
            try:
                out.extend(worker.children())
            except psutil.NoSuchProcess:
                continue
        return out


def wait_for(what: str, check: Any, timeout: float, airflow: Airflow, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    logs = "\n".join(f"--- {n}\n{airflow.log(n)}" for n in airflow.procs)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")
