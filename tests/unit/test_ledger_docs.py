"""The docs' table of the ledger's option sets says what the code does: each refusal's message as quoted there,
and every option set that is not refused listed as exact (docs/ledger.md, "Every option set: exact or refused")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.ledger import ChangedFilesError, select_files
from airflow_provider_s3ch.core.ledger_rebuild import EarlierRow, RebuildRefused, plan_rebuild
from airflow_provider_s3ch.core.ledger_request import check_request
from airflow_provider_s3ch.core.ledger_rows import LedgerRow, LoadActivity
from airflow_provider_s3ch.core.models import LoadRequest, S3Object

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ledger.md"


def table() -> list[list[str]]:
    """The table's rows (the header left out), each as its four cells."""
    section = DOCS.read_text().split("## Every option set: exact or refused", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| `")]
    return rows[1:]


def messages(cell: str) -> list[re.Pattern[str]]:
    """The messages a cell quotes, as patterns: ``N`` a number, ``KEY`` a key, ``…`` anything."""
    out = []
    for text in re.findall(r'"([^"]+)"', cell):
        parts = [re.escape(p) for p in re.split(r"(\bN\b|KEY|…)", text)]
        pattern = "".join({"N": r"\d+", "KEY": ".+?", "…": ".*"}.get(p, p) for p in parts)
        out.append(re.compile(pattern, re.DOTALL))
    return out


def request(mode: str, on_changed: str, chunked: bool) -> LoadRequest:
    return LoadRequest(s3_uri="s3://b/in/*.csv", table="db.t", skip_loaded=True, mode=mode, on_changed=on_changed,
                       **({"max_files_per_load": 2} if chunked else {}))


def test_every_option_set_the_table_refuses_is_refused_with_its_message_and_the_others_run() -> None:
    rows = table()
    seen = set()
    for mode_cell, changed_cell, chunk_cell, outcome in rows:
        modes = re.findall(r"`(\w+)`", mode_cell)
        changed = ["fail", "skip", "reload"] if changed_cell == "any" else re.findall(r"`(\w+)`", changed_cell)
        chunks = {"whole": [False], "chunked": [True], "whole or chunked": [False, True], "any": [False, True]}[
            chunk_cell]
        for mode in modes:
            for on_changed in changed:
                for chunked in chunks:
                    seen.add((mode, on_changed, chunked))
                    req = request(mode, on_changed, chunked)
                    if outcome.startswith("**refused**"):
                        with pytest.raises(InvalidRequestError) as refused:
                            check_request(req)
                        assert messages(outcome)[0].fullmatch(str(refused.value)), (outcome, str(refused.value))
                    else:
                        assert outcome.startswith("exact"), outcome
                        check_request(req)
    every = {(m, c, k) for m in ("append", "replace_partitions", "overwrite") for c in ("fail", "skip", "reload")
             for k in (False, True)}
    assert seen >= every, f"option sets the table does not say: {sorted(every - seen)}"


def test_the_run_time_refusals_the_table_quotes_are_the_codes() -> None:
    cells = {(r[0], r[1]): r[3] for r in table()}
    with pytest.raises(ChangedFilesError) as changed:
        select_files([S3Object(key="in/a.csv", size=1, etag="e2")],
                     [LedgerRow(key="in/a.csv", etag="e1", load_id="x", state="loaded")], LoadActivity(), own="me")
    assert messages(cells[("`append`", "`fail`")])[0].fullmatch(str(changed.value)), str(changed.value)
    with pytest.raises(RebuildRefused) as rebuild:
        plan_rebuild(["1"], [EarlierRow(bucket="b", key="k", etag="e", load_id="x", unit="x", state="loaded",
                                        partitions=("1",))], bucket="b", keys={"new"}, in_flight=set(), listed={})
    refused = messages(cells[("`replace_partitions`", "`fail`")])
    assert any(p.fullmatch(str(rebuild.value)) for p in refused), str(rebuild.value)
