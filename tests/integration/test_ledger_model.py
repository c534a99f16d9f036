"""The file ledger against a model, over histories (Hypothesis's stateful testing on the real local stack).

Rules put new files (rows in one or more partitions), overwrite a file (same or other partitions), put an
earlier version back, delete a file, and run a load under one of the option sets the docs offer
(``append`` / ``replace_partitions`` x ``on_changed`` fail / skip / reload x whole / chunked
``max_files_per_load``); some loads are SIGKILLed at a random statement (just before it is sent, or a few
milliseconds after, while it may still run) and retried, as Airflow retries a task whose worker died; or,
before the retry, time passes until the killed load's heartbeat is older than its window, and another run
takes what the killed load held and did not put in a staging table. Runs from events (``files_from="events"``, on
Airflow 3) name some of the notifications S3 sent so far: late, repeated, or of a version overwritten or deleted
since; such a run loads the files they name as S3 holds them now, and leaves out those gone.

The model says what each run must do: load which files, refuse (naming why), or do nothing; and what the
table then holds, partition by partition: which version of which file. After every run the target is
compared, per partition (``count()`` and ``sum(cityHash64(...))``), with ClickHouse's own read of exactly
those versions (every version put is kept under an archive prefix, so an overwritten or deleted file's
rows can still be read); the ledger holds one ``loaded`` row per key, of the version the model holds (a
reloaded file's older versions are ``released``), no claim or ``pending`` row is left, and no staging table
is left.

``S3CH_LEDGER_HISTORIES`` sets the number of histories (20 by default; ``make ledger-histories`` runs 500)
and ``S3CH_LEDGER_HISTORIES_REPORT`` a file the run's counts go to.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import time
import types
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from airflow.providers.common.compat.sdk import AirflowSkipException
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.core.events import EventFile, payloads
from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME
from airflow_provider_s3ch.core.ledger_sql import render_create_ledger
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX
from airflow_provider_s3ch.errors import S3chError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import counting, fake_context, module_counts

pytestmark = pytest.mark.integration

BUCKET = "s3ch-histories"
STRUCTURE = "p UInt8, file UInt8, ver UInt32, id UInt32"
KEYS = 5
PARTITIONS = 4
#: The loads' heartbeat interval (seconds): a killed load's claims are stale 4 beats after its last one.
HEARTBEAT = 0.5

#: Every option set of the ledger: (mode, on_changed, max_files_per_load).
ALL_OPTION_SETS = [(mode, changed, chunk) for mode in ("append", "replace_partitions")
                   for changed in ("fail", "skip", "reload") for chunk in (None, 1, 2)]


def refused(mode: str, on_changed: str, chunk: int | None) -> bool:
    """The option sets refused before anything is listed (``core.ledger_request.check_request``)."""
    return (chunk is not None and mode != "append") or (on_changed == "reload" and mode == "append")


#: The option sets the histories run under: the ones that load.
OPTION_SETS = [o for o in ALL_OPTION_SETS if not refused(*o)]
#: Those that load into a table with views (the replace modes refuse one).
APPEND_SETS = [o for o in OPTION_SETS if o[0] == "append"]

STATS: Counter[str] = Counter()


# ---------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Version:
    """One upload: its rows per partition (``{p: rows}``)."""

    ver: int
    file: int
    rows: tuple[tuple[int, int], ...]

    @property
    def partitions(self) -> set[str]:
        return {str(p) for p, _ in self.rows}

    def body(self) -> bytes:
        return "".join(f"{p},{self.file},{self.ver},{i}\n" for p, n in self.rows for i in range(n)).encode()


@dataclass
class Model:
    """What S3 holds, and what the target and the ledger must hold."""

    s3: dict[int, Version] = field(default_factory=dict)
    #: per file, the version the ledger records as loaded (the newest)
    loaded: dict[int, Version] = field(default_factory=dict)
    #: per file, the partitions the ledger records for it: its insert's staging table's
    recorded: dict[int, set[str]] = field(default_factory=dict)
    #: per partition id, the versions whose rows in that partition the target holds
    table: dict[str, set[Version]] = field(default_factory=dict)

    def run(self, mode: str, on_changed: str, chunk: int | None, named: set[int] | None = None) -> str:
        """Apply one run to the model; return what it must do: ``refused-request``, ``refused-changed``,
        ``refused-rebuild``, ``nothing`` or ``loaded``.

        :param named: a run from events: the files its events name (whatever version they name: the run loads
            the one S3 holds now; a file gone is left out); None: a run that lists."""
        if refused(mode, on_changed, chunk) or (named is not None and on_changed == "fail"):
            return "refused-request"
        new: list[int] = []
        changed: list[int] = []
        for n in sorted(k for k in self.s3 if named is None or k in named):
            v = self.s3[n]
            if self.loaded.get(n) == v:
                continue
            if n in self.loaded:
                changed.append(n)
            else:
                new.append(n)
        if changed and on_changed == "fail":
            return "refused-changed"
        sel = sorted(new + (changed if on_changed == "reload" else []))
        if not sel:
            return "nothing"
        if mode == "append":
            size = chunk or len(sel)
            for start in range(0, len(sel), size):
                part = sel[start:start + size]
                staged = set().union(*(self.s3[n].partitions for n in part))
                for n in part:
                    self._add(self.s3[n])
                    self.loaded[n], self.recorded[n] = self.s3[n], staged
            return "loaded"
        staged = set().union(*(self.s3[n].partitions for n in sel))
        every = staged | set().union(*(self.recorded[n] for n in sel if n in self.loaded))
        earlier = [n for n in self.loaded if n not in sel and self.recorded[n] & every]
        if any(self.s3.get(n) != self.loaded[n] for n in earlier):
            return "refused-rebuild"
        for p in every:
            self.table[p] = {v for v in [*(self.loaded[n] for n in earlier), *(self.s3[n] for n in sel)]
                             if p in v.partitions}
        for n in sel:
            self.loaded[n], self.recorded[n] = self.s3[n], staged
        return "loaded"

    def _add(self, v: Version) -> None:
        for p in v.partitions:
            self.table.setdefault(p, set()).add(v)


# ---------------------------------------------------------------------- a load killed at a statement


def context_of(run_id: str, try_number: int, events: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A task context; with ``events`` (payloads), of a run those S3 watcher's events triggered."""
    context = fake_context("load", try_number, run_id)
    if events is not None:
        context["triggering_asset_events"] = {"landing": [
            types.SimpleNamespace(extra={"from_trigger": True, "payload": e}) for e in events]}
    return context


def _killed_load(env: dict[str, str], kwargs: dict[str, Any], run_id: str, die_at: int, in_flight_ms: int,
                 events: list[dict[str, Any]] | None = None) -> None:
    """In a forked worker: the load, SIGKILLed at its ``die_at``-th statement to ClickHouse (:func:`counting`)."""
    os.environ.update(env)
    try:
        with counting(die_at, in_flight_ms):
            S3ToClickHouseOperator(task_id="load", **kwargs).execute(context_of(run_id, 1, events))
    except BaseException:  # noqa: BLE001 - the retry in the test says what the run must do
        os._exit(1)


_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["airflow_provider_s3ch.operators.s3_to_clickhouse", __name__])


# ---------------------------------------------------------------------- the machine


class LedgerHistories(RuleBasedStateMachine):
    stack: ClassVar[LocalStack]
    #: The option set of every run of the history.
    options: ClassVar[tuple[str, str, int | None]] = OPTION_SETS[0]

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.tag = uuid.uuid4().hex[:10]
        self.table = f"default.lh_{self.tag}"
        self.next_ver = 1
        self.versions: list[Version] = []
        #: every notification S3 would have sent (one per put), in order: what event runs draw from
        self.notifications: list[EventFile] = []
        self.create_target()
        self.stack.clickhouse_client().execute(render_create_ledger(TableRef(database="default", name=LEDGER_NAME)))
        STATS["histories"] += 1

    def create_target(self) -> None:
        self.stack.clickhouse_client().execute(
            f"CREATE TABLE {self.table} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY p ORDER BY (file, id)")

    def teardown(self) -> None:
        self.stack.clickhouse_client().execute(f"DROP TABLE IF EXISTS {self.table} SYNC")

    def staging_left(self) -> list[str]:
        """The staging tables on the target's node(s)."""
        return [name for (name,) in self.stack.clickhouse_client().execute(
            "SELECT name FROM system.tables WHERE database = 'default' AND startsWith(name, %(p)s)",
            {"p": STAGING_PREFIX})]

    # --- S3
    def key(self, n: int) -> str:
        return f"lh-{self.tag}/f{n}.csv"

    def archive(self, ver: int) -> str:
        return f"lh-{self.tag}-archive/v{ver}.csv"

    def put(self, n: int, v: Version) -> None:
        s3 = self.stack.s3_client()
        s3.put_object(Bucket=BUCKET, Key=self.key(n), Body=v.body())
        s3.put_object(Bucket=BUCKET, Key=self.archive(v.ver), Body=v.body())
        self.model.s3[n] = v
        self.notifications.append(EventFile(key=self.key(n), size=len(v.body()), etag=hashlib.md5(v.body()).hexdigest(),
                                            last_modified=datetime.now(UTC)))

    def new_version(self, n: int, rows: list[tuple[int, int]]) -> Version:
        v = Version(self.next_ver, n, tuple(sorted(dict(rows).items())))
        self.next_ver += 1
        self.versions.append(v)
        return v

    ROWS = st.lists(st.tuples(st.integers(0, PARTITIONS - 1), st.integers(1, 4)), min_size=1, max_size=3)

    @initialize(files=st.lists(ROWS, min_size=1, max_size=3))
    def first_files(self, files: list[list[tuple[int, int]]]) -> None:
        STATS["options " + "/".join(str(o) for o in self.options)] += 1
        for n, rows in enumerate(files):
            self.put_new_file(n, rows)

    @precondition(lambda self: len(self.model.s3) < KEYS)
    @rule(data=st.data(), files=st.lists(ROWS, min_size=1, max_size=2))
    def put_new(self, data: st.DataObject, files: list[list[tuple[int, int]]]) -> None:
        for rows in files:
            free = [n for n in range(KEYS) if n not in self.model.s3]
            if free:
                self.put_new_file(data.draw(st.sampled_from(free)), rows)

    def put_new_file(self, n: int, rows: list[tuple[int, int]]) -> None:
        self.put(n, self.new_version(n, rows))

    @precondition(lambda self: self.model.s3)
    @rule(data=st.data(), rows=ROWS)
    def overwrite(self, data: st.DataObject, rows: list[tuple[int, int]]) -> None:
        n = data.draw(st.sampled_from(sorted(self.model.s3)))
        self.put(n, self.new_version(n, rows))

    @precondition(lambda self: any(v != self.model.s3.get(v.file) for v in self.versions))
    @rule(data=st.data())
    def put_back_an_earlier_version(self, data: st.DataObject) -> None:
        v = data.draw(st.sampled_from([v for v in self.versions if v != self.model.s3.get(v.file)]))
        self.put(v.file, v)

    @precondition(lambda self: self.model.s3)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        n = data.draw(st.sampled_from(sorted(self.model.s3)))
        self.stack.s3_client().delete_object(Bucket=BUCKET, Key=self.key(n))
        del self.model.s3[n]

    # --- loads
    def kwargs(self, events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        mode, on_changed, chunk = self.options
        return {"s3_uri": f"s3://{BUCKET}/lh-{self.tag}/*.csv", "table": self.table, "format": "CSV",
                "structure": STRUCTURE, "skip_loaded": True, "skip_when_empty": True, "mode": mode,
                "on_changed": on_changed, "claim_heartbeat": HEARTBEAT,
                **({"max_files_per_load": chunk} if chunk else {}),
                **({"files_from": "events"} if events is not None else {})}

    def outcome(self, run_id: str, try_number: int, must: str, events: list[dict[str, Any]] | None = None) -> str:
        """A run's outcome: ``done``, or its error's text."""
        try:
            with counting() as sent:
                S3ToClickHouseOperator(task_id="load", **self.kwargs(events)).execute(
                    context_of(run_id, try_number, events))
            if try_number == 1:
                STATS[f"statements of a run that {must}: up to"] = max(
                    STATS[f"statements of a run that {must}: up to"], sent[0])
            return "done"
        except AirflowSkipException:  # nothing listed (skip_when_empty)
            return "done"
        except S3chError as exc:
            return str(exc)

    def expect(self, run_id: str, try_number: int, must: str, events: list[dict[str, Any]] | None = None,
               nothing_allowed: bool = False, outcome: str | None = None) -> None:
        """Run (or, given its ``outcome``, judge) a run that must do ``must``."""
        outcome = outcome if outcome is not None else self.outcome(run_id, try_number, must, events)
        STATS["run " + must] += 1
        if nothing_allowed and outcome == "done":
            STATS["run that must refuse found nothing of its own"] += 1
        elif must in ("loaded", "nothing"):
            assert outcome == "done", f"{self.options}: the run must load ({must}), it failed: {outcome}"
        elif must == "refused-request":
            assert "cannot run with" in outcome, f"{self.options}: not refused: {outcome}"
        elif must == "refused-changed":
            assert "changed since they were loaded" in outcome, f"{self.options}: not refused: {outcome}"
        else:
            assert "cannot be read again as they were loaded" in outcome, f"{self.options}: not refused: {outcome}"

    @rule()
    def load(self) -> None:
        self.expect(f"run-{uuid.uuid4().hex[:8]}", 1, self.model.run(*self.options))

    @rule(die_at=st.one_of(st.integers(1, 25), st.integers(26, 80)), in_flight_ms=st.sampled_from([0, 0, 3, 15]))
    def load_killed_and_retried(self, die_at: int, in_flight_ms: int) -> None:
        run_id = self.killed_load(die_at, in_flight_ms)
        self.expect(run_id, 2, self.model.run(*self.options))

    @rule(die_at=st.one_of(st.integers(1, 25), st.integers(26, 80)), in_flight_ms=st.sampled_from([0, 3]))
    def load_killed_then_another_run_once_its_heartbeat_is_old_then_the_retry(
        self, die_at: int, in_flight_ms: int,
    ) -> None:
        run_id = self.killed_load(die_at, in_flight_ms)
        self.wait_for_heartbeats_to_age()
        must = self.model.run(*self.options)  # the two runs together load what one run would
        # where the load must be refused (earlier files cannot be read again), the other run may find every file
        # it would refuse for held by the killed load, and end with nothing; the killed load's retry refuses
        self.expect(f"run-{uuid.uuid4().hex[:8]}", 1, must, nothing_allowed=must == "refused-rebuild")
        self.expect(run_id, 2, must)
        STATS["taken over after the heartbeat aged"] += 1

    # --- loads from events: late, repeated and stale notifications, of files overwritten or deleted since
    def draw_events(self, data: st.DataObject) -> tuple[list[dict[str, Any]], set[int]]:
        """Events naming some of the notifications sent so far (any of them: late, repeated, of a version
        overwritten or deleted since), and the files they name."""
        named = data.draw(st.lists(st.sampled_from(self.notifications), min_size=1, max_size=6))
        events = [p.to_event() for p in payloads(BUCKET, named, limit=data.draw(st.sampled_from([1, 2, 1000])))]
        files = {int(f.key.rsplit("/f", 1)[1].removesuffix(".csv")) for f in named}
        return events, files

    @precondition(lambda self: AIRFLOW_3 and self.notifications)
    @rule(data=st.data())
    def load_from_events(self, data: st.DataObject) -> None:
        events, files = self.draw_events(data)
        STATS["run from events"] += 1
        self.expect(f"run-{uuid.uuid4().hex[:8]}", 1, self.model.run(*self.options, named=files), events)

    @precondition(lambda self: AIRFLOW_3 and self.notifications)
    @rule(data=st.data(), die_at=st.one_of(st.integers(1, 25), st.integers(26, 80)),
          in_flight_ms=st.sampled_from([0, 0, 3, 15]))
    def load_from_events_killed_and_retried(self, data: st.DataObject, die_at: int, in_flight_ms: int) -> None:
        events, files = self.draw_events(data)
        run_id = self.killed_load(die_at, in_flight_ms, events)
        STATS["run from events, killed and retried"] += 1
        self.expect(run_id, 2, self.model.run(*self.options, named=files), events)

    def killed_load(self, die_at: int, in_flight_ms: int, events: list[dict[str, Any]] | None = None) -> str:
        """A load SIGKILLed at its ``die_at``-th statement, in a worker of its own; its run id."""
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        env = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW")}
        worker = _FORKS.Process(target=_killed_load, args=(env, self.kwargs(events), run_id, die_at, in_flight_ms,
                                                           events))
        worker.start()
        worker.join(300)
        assert worker.exitcode is not None, "the worker neither died nor finished in 300 s"
        STATS["killed" if worker.exitcode == -signal.SIGKILL else "kill point after the load"] += 1
        if worker.exitcode == -signal.SIGKILL:
            STATS[f"killed at statement {die_at:02d}{f' +{in_flight_ms} ms' if in_flight_ms else ' (before)'}"] += 1
        return run_id

    def wait_for_heartbeats_to_age(self) -> None:
        """Time passes until every heartbeat of the target's loads with claims is older than its window (by the
        server's clock), and so is every such claim."""
        ch = self.stack.clickhouse_client()
        deadline = time.monotonic() + 120
        while ch.execute(
            f"SELECT count() FROM default.{LEDGER_NAME} AS l FINAL LEFT JOIN (SELECT load_id, max(beat_at) AS b, "
            f"argMax(window_s, beat_at) AS w FROM default.{LEDGER_NAME}_heartbeat GROUP BY load_id) AS h USING "
            "load_id WHERE l.table = %(t)s AND l.state = 'claimed' AND "
            "dateDiff('microsecond', greatest(l.claimed_at, h.b), now64(6)) / 1e6 < h.w", {"t": self.table},
        )[0][0]:
            assert time.monotonic() < deadline, "the killed load's heartbeat did not age in 120 s"
            time.sleep(0.1)

    # --- what must hold after every step
    @invariant()
    def the_table_is_the_models(self) -> None:
        want = {p: vs for p, vs in self.model.table.items() if vs}
        ch = self.stack.clickhouse_client()
        got = {str(p): (int(c), int(h)) for p, c, h in ch.execute(
            f"SELECT toString(p), count(), sum(cityHash64(p, file, ver, id)) FROM {self.table} "
            "GROUP BY p")}
        expected: dict[str, tuple[int, int]] = {}
        if want:
            vers = sorted({v.ver for vs in want.values() for v in vs})
            pairs = ", ".join(f"('{p}', {v.ver})" for p, vs in want.items() for v in vs)
            url = f"{self.stack.s3_endpoint}/{BUCKET}/lh-{self.tag}-archive/v{{{','.join(map(str, vers))}}}.csv"
            expected = {str(p): (int(c), int(h)) for p, c, h in ch.execute(
                f"SELECT toString(p) AS pid, count(), sum(cityHash64(p, file, ver, id)) FROM s3('{url}', "
                f"'{self.stack.s3_access_key}', '{self.stack.s3_secret_key}', 'CSV', '{STRUCTURE}') "
                f"WHERE has([{pairs}], (pid, ver)) GROUP BY pid")}
        assert got == expected, f"{self.options}: the table differs from the files' rows the model holds"

    @invariant()
    def the_ledger_is_the_models(self) -> None:
        ch = self.stack.clickhouse_client()
        rows = ch.execute(
            f"SELECT key, etag, toString(state) FROM default.{LEDGER_NAME} FINAL WHERE table = %(t)s",
            {"t": self.table})
        loaded = Counter(k for k, _, s in rows if s == "loaded")
        assert all(c == 1 for c in loaded.values()), f"a key with more than one loaded version: {rows}"
        assert not [r for r in rows if r[2] in ("claimed", "pending")], f"claims left: {rows}"
        newest = dict(ch.execute(
            f"SELECT key, argMax(etag, version) FROM default.{LEDGER_NAME} FINAL WHERE table = %(t)s "
            "AND state = 'loaded' GROUP BY key", {"t": self.table}))
        want = {self.key(n): hashlib.md5(v.body()).hexdigest() for n, v in self.model.loaded.items()}
        assert newest == want, f"{self.options}: the ledger's loaded versions differ from the model's"

    @invariant()
    def no_staging_table_is_left(self) -> None:
        left = self.staging_left()
        assert not left, f"staging tables left: {left}"


class ViewLedgerHistories(LedgerHistories):
    """The same histories into a target that two materialized views read: a copy of its rows partitioned by
    another key, and a ``SummingMergeTree`` of each partition's rows and their hash. Each must hold what the
    table holds after every step: fed once by every file loaded, whatever the kills."""

    def create_target(self) -> None:
        super().create_target()
        t, ch = self.table, self.stack.clickhouse_client()
        for ddl in (
            f"CREATE TABLE {t}_copy ({STRUCTURE}) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY (file, id)",
            f"CREATE MATERIALIZED VIEW {t}_mv_copy TO {t}_copy AS SELECT * FROM {t}",
            f"CREATE TABLE {t}_sum (p UInt8, n UInt64, h UInt64) ENGINE = SummingMergeTree ORDER BY p",
            f"CREATE MATERIALIZED VIEW {t}_mv_sum TO {t}_sum AS SELECT p, count() AS n, "
            f"sum(cityHash64(p, file, ver, id)) AS h FROM {t} GROUP BY p",
        ):
            ch.execute(ddl)
        STATS["histories into a table with views"] += 1

    def teardown(self) -> None:
        ch = self.stack.clickhouse_client()
        for suffix in ("_mv_copy", "_mv_sum", "_copy", "_sum"):
            ch.execute(f"DROP TABLE IF EXISTS {self.table}{suffix} SYNC")
        super().teardown()

    @invariant()
    def every_view_holds_what_the_table_holds(self) -> None:
        ch, t = self.stack.clickhouse_client(), self.table
        table = sorted(ch.execute(f"SELECT p, count(), sum(cityHash64(p, file, ver, id)) FROM {t} GROUP BY p"))
        copy = sorted(ch.execute(f"SELECT p, count(), sum(cityHash64(p, file, ver, id)) FROM {t}_copy GROUP BY p"))
        sums = sorted(ch.execute(f"SELECT p, sum(n), sum(h) FROM {t}_sum GROUP BY p"))
        assert copy == table, f"{self.options}: the view's copy differs from the table"
        assert sums == table, f"{self.options}: the rollup view differs from the table"


@pytest.mark.parametrize("options", [o for o in ALL_OPTION_SETS if refused(*o)])
def test_an_option_set_that_cannot_be_exact_is_refused_before_anything_is_read(
    stack: LocalStack, bucket: str, options: tuple[str, str, int | None],
) -> None:
    LedgerHistories.stack, LedgerHistories.options = stack, options
    machine = LedgerHistories()
    try:
        machine.first_files([[(0, 2), (1, 1)]])
        with pytest.raises(S3chError, match=r"cannot run with mode=.*; use mode="):
            S3ToClickHouseOperator(task_id="load", **machine.kwargs()).execute(fake_context())
        machine.the_table_is_the_models()
        assert not machine.stack.clickhouse_client().execute(
            f"SELECT 1 FROM default.{LEDGER_NAME} WHERE table = %(t)s", {"t": machine.table})
    finally:
        machine.teardown()


@pytest.fixture(scope="module")
def bucket(stack: LocalStack) -> str:
    stack.create_bucket(BUCKET)
    return BUCKET


#: The histories' counts, printed (and written to ``S3CH_LEDGER_HISTORIES_REPORT``) after the module.
stats = module_counts(STATS, "ledger histories", "S3CH_LEDGER_HISTORIES_REPORT")


def run_histories(machine: type[LedgerHistories], env: str, default: int, sets: int) -> None:
    """``machine``'s histories: the number ``env`` names (``default`` unset), shared among ``sets`` option sets
    (each test runs one)."""
    run_state_machine_as_test(machine, settings=settings(
        max_examples=-(-int(os.environ.get(env, str(default))) // sets), stateful_step_count=8, deadline=None,
        database=None, suppress_health_check=list(HealthCheck)))


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: "/".join(str(x) for x in o))
def test_the_ledger_matches_the_model_after_any_history(
    stack: LocalStack, bucket: str, stats: Counter[str], options: tuple[str, str, int | None],
) -> None:
    """``S3CH_LEDGER_HISTORIES`` histories in all (20 by default), shared among the option sets."""
    LedgerHistories.stack, LedgerHistories.options = stack, options
    run_histories(LedgerHistories, "S3CH_LEDGER_HISTORIES", 20, len(OPTION_SETS))


@pytest.mark.parametrize("options", APPEND_SETS, ids=lambda o: "/".join(str(x) for x in o))
def test_the_ledger_into_a_table_with_views_matches_the_model_after_any_history(
    stack: LocalStack, bucket: str, stats: Counter[str], options: tuple[str, str, int | None],
) -> None:
    """``S3CH_LEDGER_VIEW_HISTORIES`` histories in all (6 by default), shared among the ``append`` option sets (the
    replace modes are refused on a table with views)."""
    ViewLedgerHistories.stack, ViewLedgerHistories.options = stack, options
    run_histories(ViewLedgerHistories, "S3CH_LEDGER_VIEW_HISTORIES", 6, len(APPEND_SETS))
