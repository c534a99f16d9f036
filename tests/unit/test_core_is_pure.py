"""The core imports no I/O library and no shell: checked on its source and on what importing it loads."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import airflow_provider_s3ch.core as core

CORE = pathlib.Path(core.__file__).parent
FORBIDDEN = ("boto3", "botocore", "clickhouse_driver", "airflow")
SHELLS = ("airflow_provider_s3ch.hooks", "airflow_provider_s3ch.operators", "airflow_provider_s3ch.errors",
          "airflow_provider_s3ch.local", "airflow_provider_s3ch.sensors", "airflow_provider_s3ch.triggers",
          "airflow_provider_s3ch.lineage", "airflow_provider_s3ch.assets")


def _imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _bad(name: str) -> bool:
    return name.split(".")[0] in FORBIDDEN or any(name == s or name.startswith(s + ".") for s in SHELLS)


def test_no_core_module_imports_an_io_library_or_a_shell() -> None:
    modules = sorted(CORE.rglob("*.py"))
    assert len(modules) >= 10
    offenders = {str(p.relative_to(CORE)): sorted(filter(_bad, _imports(p))) for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_the_core_loads_none_of_them() -> None:
    names = [
        "airflow_provider_s3ch.core." + ".".join(p.relative_to(CORE).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted(CORE.rglob("*.py"))
    ]
    code = (
        "import importlib, json, sys\n"
        f"for name in {names!r}: importlib.import_module(name.rstrip('.'))\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert [m for m in loaded if _bad(m)] == []
    assert "airflow_provider_s3ch.core.plan" in loaded
