"""The load path's frame: ``load/`` imports no Airflow module of its own and never the shells that use it
(the operator, the triggers, the sensor); the servers are reached through the hooks only."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_provider_s3ch.load as load_package

LOAD = Path(load_package.__file__).parent
FORBIDDEN = ("airflow", "clickhouse_driver", "boto3", "botocore")
SHELLS = ("airflow_provider_s3ch.operators", "airflow_provider_s3ch.triggers", "airflow_provider_s3ch.sensors")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_the_load_package_imports_no_airflow_and_no_io_library_of_its_own() -> None:
    found = {
        f"{path.name}: {name}"
        for path in LOAD.glob("*.py")
        for name in _imports(path)
        if name.split(".")[0] in FORBIDDEN
    }
    assert not found, f"load/ must reach Airflow and the servers through the hooks only: {sorted(found)}"


def test_the_load_package_never_imports_the_shells_that_run_it() -> None:
    found = {
        f"{path.name}: {name}" for path in LOAD.glob("*.py") for name in _imports(path) if name.startswith(SHELLS)
    }
    assert not found, f"the operator hands the run its request and options, not the other way: {sorted(found)}"

