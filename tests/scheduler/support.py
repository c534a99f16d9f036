"""Airflow's real components as processes, for the tests that go through the real scheduler: the package's
runner (:mod:`airflow_provider_s3ch.local.airflow`) on the tests' DAGs, and what only the tests need."""

from __future__ import annotations

from pathlib import Path

import psutil

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.airflow import Airflow as LocalAirflow
from airflow_provider_s3ch.local.airflow import wait_for

ROOT = Path(__file__).resolve().parents[2]
DAGS = Path(__file__).parent / "dags"

__all__ = ["DAGS", "ROOT", "Airflow", "wait_for"]


class Airflow(LocalAirflow):
    """Airflow's components as real processes in one AIRFLOW_HOME, on the tests' DAGs (tests/scheduler/dags)."""

    def __init__(self, home: Path, stack: LocalStack, extra_env: dict[str, str]) -> None:
        super().__init__(home, stack, extra_env, dags_folder=DAGS, pythonpath=[ROOT])

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
