"""SQL comes from the pure renderers in ``core/``: the shells that run statements (the hooks, the load path, the
operators, the triggers, the sensor) hold no statement text of their own, read from their source.

A statement is a string constant (an f-string's too) that starts with one of ClickHouse's statement keywords in
capitals and a word boundary (``SELECT``, ``KILL``, ``ALTER``, ...); docstrings are not statements. ``local/``
(the demo and test servers, which set themselves up) is not a shell of the load and is not read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import airflow_provider_s3ch

PACKAGE = Path(airflow_provider_s3ch.__file__).parent
SHELLS = ("hooks", "load", "operators", "triggers", "sensors")
KEYWORDS = ("SELECT", "KILL", "ALTER", "INSERT", "DROP", "CREATE", "SYSTEM", "DESCRIBE", "EXCHANGE", "OPTIMIZE",
            "TRUNCATE", "RENAME", "SHOW", "WITH", "DETACH", "ATTACH")
_STATEMENT_RE = re.compile(rf"\s*(?:{'|'.join(KEYWORDS)})\b")

def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }


def statements_in(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant in ``source`` that starts like a statement, docstrings left out."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        and _STATEMENT_RE.match(node.value)
    )


def _found() -> dict[tuple[str, str], int]:
    """(file, first 40 characters) -> line, for every statement in the shells."""
    out = {}
    for shell in SHELLS:
        for path in sorted((PACKAGE / shell).rglob("*.py")):
            name = path.relative_to(PACKAGE).as_posix()
            for line, text in statements_in(path.read_text()):
                out[(name, text.strip()[:40])] = line
    return out


def test_the_checker_finds_statements_and_leaves_docstrings_and_messages_alone() -> None:
    source = (
        '"""SELECT in a module docstring is prose."""\n'
        "def f(t):\n"
        '    """KILL QUERY in a docstring is prose too."""\n'
        '    log.warning("On %s, KILL QUERY failed", host)\n'
        '    message = "Selected: SELECTION is no statement"\n'
        '    run(f"SELECT count() FROM {t}")\n'
        '    run("  KILL QUERY WHERE query_id = %(q)s")\n'
        '    return "ALTER TABLE t ADD COLUMN c UInt8"\n'
    )
    assert [line for line, _ in statements_in(source)] == [6, 7, 8]


def test_the_shells_hold_no_statement_text_of_their_own() -> None:
    found = _found()
    assert len(list((PACKAGE / "hooks").glob("*.py"))) >= 5  # the walk reads the shells
    unexpected = {f"{name}:{line}: {start!r}" for (name, start), line in found.items()}
    assert not unexpected, (
        "the shells run statements that the core renders (core/server_sql.py, core/sql.py, core/ledger_sql.py, "
        f"...); move these there: {sorted(unexpected)}"
    )

