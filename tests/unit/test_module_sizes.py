"""The shells stay small (docs/architecture.md): a module that outgrows its limit holds a decision that belongs in
``core/`` or a phase of ``load/``."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_s3ch"

#: The most lines a module of each shell holds.
LIMITS = {"hooks": 300, "operators": 350, "triggers": 300, "sensors": 300, "load": 400}


@pytest.mark.parametrize("shell", sorted(LIMITS))
def test_every_module_of_a_shell_stays_within_its_limit(shell: str) -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / shell).glob("*.py")}
    assert sizes, shell
    over = {name: n for name, n in sizes.items() if n > LIMITS[shell]}
    assert not over, f"{shell}/ modules over {LIMITS[shell]} lines: {over}"
