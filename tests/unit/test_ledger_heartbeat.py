"""A ledger load's heartbeat: what a claim means given its load's last beat (pure), and how the load knows
whether it may still count on its claims (:class:`~airflow_provider_s3ch.load.heartbeat.Heartbeat`, with a
stand-in connection that records the beats or refuses them)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.ledger import (
    DEFAULT_CLAIM_HEARTBEAT,
    DEFAULT_CLAIM_TIMEOUT,
    HEARTBEAT_WINDOW_BEATS,
    confirm,
    select_files,
)
from airflow_provider_s3ch.core.ledger_rows import Heartbeat as Beat
from airflow_provider_s3ch.core.ledger_rows import LedgerRow, LoadActivity, activity, row_status
from airflow_provider_s3ch.core.ledger_sql import heartbeat_ref, render_create_heartbeats, render_staging_tables
from airflow_provider_s3ch.core.models import S3Object, TableRef
from airflow_provider_s3ch.load.heartbeat import Heartbeat

ME, OTHER = "aaaa", "bbbb"
T = DEFAULT_CLAIM_TIMEOUT
W = DEFAULT_CLAIM_HEARTBEAT * HEARTBEAT_WINDOW_BEATS
LEDGER = TableRef(database="db", name="_s3ch_ledger")


def claim(key: str, load: str = OTHER, *, age: float = 1.0, block: int = 1) -> LedgerRow:
    return LedgerRow(key=key, etag="e1", load_id=load, query_id=f"s3ch-{load}-try1", state="claimed", age_s=age,
                     block=block, size=10)


def obj(key: str) -> S3Object:
    return S3Object(key=key, size=10, etag="e1", format="CSV")


def beats(**ages: float) -> LoadActivity:
    return LoadActivity(heartbeats={load: Beat(age, W) for load, age in ages.items()})


# ---------------------------------------------------------------------- what a claim means


@pytest.mark.parametrize(
    ("load", "claim_age", "beat_age", "expected"),
    [
        (OTHER, 600, 1, "live"),  # slow between claim and insert, and beating
        (OTHER, 600, W + 1, "stale"),  # its worker died: free a window after its last beat, not after an hour
        (OTHER, 2, W + 1, "live"),  # the claim itself is a sign of life (a renewal, or the first seconds)
        (OTHER, T + 1, 1, "stale"),  # claim_timeout stays the upper bound
        (OTHER, 600, None, "live"),  # a load that writes no heartbeat (an older version): claim_timeout alone
        (OTHER, T + 1, None, "stale"),
        (ME, 600, W / 2 + 1, "stale"),  # the load itself counts on half the window
        (ME, 600, W / 2 - 1, "live"),
        (ME, T / 2 + 1, 1, "stale"),
    ],
)
def test_a_claim_of_a_load_that_runs_nothing_is_live_while_its_load_beats(
    load: str, claim_age: float, beat_age: float | None, expected: str,
) -> None:
    facts = beats(**{load: beat_age}) if beat_age is not None else LoadActivity()
    assert row_status(claim("k", load, age=claim_age), facts, own=ME, claim_timeout=T) == expected


def test_a_load_that_runs_a_query_or_has_a_staging_table_holds_its_claims_whatever_its_heartbeat() -> None:
    old = claim("k", age=T + 1)
    assert row_status(old, LoadActivity(running=frozenset({OTHER}), heartbeats={OTHER: Beat(T, W)}), own=ME,
                      claim_timeout=T) == "live"
    assert row_status(old, LoadActivity(staging=frozenset({OTHER}), heartbeats={OTHER: Beat(T, W)}), own=ME,
                      claim_timeout=T) == "live"


AGES = st.floats(0, 2 * T, allow_nan=False)


@given(claim_age=AGES, beat_age=AGES, window=st.floats(0.1, 600, allow_nan=False), timeout=st.floats(1, 2 * T))
def test_the_load_itself_never_counts_on_a_claim_another_load_may_take(
    claim_age: float, beat_age: float, window: float, timeout: float,
) -> None:
    facts = LoadActivity(heartbeats={ME: Beat(beat_age, window)})
    row = claim("k", ME, age=claim_age)
    if row_status(row, facts, own=OTHER, claim_timeout=timeout) == "stale":  # as another load sees it
        assert row_status(row, facts, own=ME, claim_timeout=timeout) == "stale"


@given(claim_age=AGES, beat_age=AGES, older=st.floats(0, T), window=st.floats(0.1, 600), own=st.booleans())
def test_a_heartbeat_only_shortens_a_claim_and_an_older_beat_never_revives_it(
    claim_age: float, beat_age: float, older: float, window: float, own: bool,
) -> None:
    load = ME if own else OTHER
    row = claim("k", load, age=claim_age)
    with_beat = row_status(row, LoadActivity(heartbeats={load: Beat(beat_age, window)}), own=ME, claim_timeout=T)
    if with_beat == "live":
        assert row_status(row, LoadActivity(), own=ME, claim_timeout=T) == "live"
    later = row_status(row.model_copy(update={"age_s": claim_age + older}),
                       LoadActivity(heartbeats={load: Beat(beat_age + older, window)}), own=ME, claim_timeout=T)
    if with_beat == "stale":
        assert later == "stale"


def test_the_facts_keep_the_heartbeats_of_the_loads_asked_about() -> None:
    facts = activity([], [], [ME, OTHER], [(OTHER, 3.5, 20.0), ("cccc", 1.0, 20.0)])
    assert facts.heartbeats == {OTHER: Beat(3.5, 20.0)}


# ---------------------------------------------------------------------- which files a load takes


def test_a_dead_loads_claims_are_taken_and_a_beating_loads_are_left_to_it() -> None:
    rows = [claim("in/a.csv", OTHER, age=600), claim("in/b.csv", "cccc", age=600)]
    facts = LoadActivity(heartbeats={OTHER: Beat(W + 1, W), "cccc": Beat(1, W)})
    sel = select_files([obj("in/a.csv"), obj("in/b.csv")], rows, facts, own=ME, claim_timeout=T)
    assert [o.key for o in sel.claim] == ["in/a.csv"] and sel.skipped_claimed == ["in/b.csv"]


def test_an_earlier_claim_of_a_dead_load_does_not_beat_this_loads_claim() -> None:
    rows = [claim("in/a.csv", OTHER, age=600, block=1), claim("in/a.csv", ME, age=0.1, block=2)]
    dead = LoadActivity(heartbeats={OTHER: Beat(W + 1, W), ME: Beat(0.1, W)})
    alive = LoadActivity(heartbeats={OTHER: Beat(1, W), ME: Beat(0.1, W)})
    assert [o.key for o in confirm([obj("in/a.csv")], rows, dead, own=ME, claim_timeout=T)[0]] == ["in/a.csv"]
    assert [o.key for o in confirm([obj("in/a.csv")], rows, alive, own=ME, claim_timeout=T)[1]] == ["in/a.csv"]


def test_the_heartbeats_are_read_with_the_staging_tables_from_the_ledgers_companion_table() -> None:
    sql, _ = render_staging_tables(LEDGER)
    assert "UNION ALL SELECT 'heartbeat', load_id" in sql and "FROM `db`.`_s3ch_ledger_heartbeat`" in sql
    assert "UNION ALL" not in render_staging_tables()[0]
    assert heartbeat_ref(LEDGER) == TableRef(database="db", name="_s3ch_ledger_heartbeat")
    assert "ReplacingMergeTree(beat_at)" in render_create_heartbeats(LEDGER)


# ---------------------------------------------------------------------- the load's own side


class Connection:
    """A stand-in for the load's connection: records the beats, or refuses them while ``refusing`` is set."""

    host, port = "ch.local", 9000

    def __init__(self) -> None:
        self.beats: list[tuple[str, float]] = []
        self.refusing = threading.Event()

    def client_for(self, host: str, port: int, *, fresh: bool = False) -> Any:
        return None

    def execute(self, sql: str, params: Any = None, **kw: Any) -> None:
        assert sql.startswith("INSERT INTO `db`.`_s3ch_ledger_heartbeat`"), sql
        if self.refusing.is_set():
            raise ConnectionError("the server does not answer")
        self.beats.extend(params)


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"not within 30 s: {what}"
        time.sleep(0.01)


def test_a_load_whose_beats_lapsed_for_half_the_window_no_longer_counts_on_its_claims_until_it_renews() -> None:
    conn = Connection()
    beat = Heartbeat(conn, LEDGER, ME, 0.05, logging.getLogger("test"))  # type: ignore[arg-type]
    assert beat.fresh()  # nothing held yet
    beat.start()
    try:
        assert conn.beats == [(ME, 0.05 * HEARTBEAT_WINDOW_BEATS)]  # the first beat, before the claims
        wait_for(lambda: len(conn.beats) >= 3, "three beats")
        conn.refusing.set()
        wait_for(lambda: not beat.fresh(), "the heartbeat reads as lapsed")
        conn.refusing.clear()
        seen = len(conn.beats)
        wait_for(lambda: len(conn.beats) > seen, "a beat after the lapse")
        assert not beat.fresh()  # beating again does not bring back claims another load may have taken
        beat.renewed(time.monotonic())
        assert beat.fresh()
    finally:
        beat.stop()
    assert beat.fresh() and not beat.started


def test_the_heartbeat_interval_must_be_positive() -> None:
    with pytest.raises(InvalidRequestError, match="claim_heartbeat"):
        Heartbeat(Connection(), LEDGER, ME, 0, logging.getLogger("test"))  # type: ignore[arg-type]
