"""The load run's orchestration, through its seam (:class:`~airflow_provider_s3ch.load.run.RunParts`), in
milliseconds: which phases run, in which order, with what, for each branch of a run.

The parts that talk to the servers (the listing, the target phase, the ledger, the inserts, the ``complete``
phase) are stand-ins that record what they were asked and answer as the real ones do; everything else is the
run's own code and the pure core (the plan, the mode's steps, the query ids, the report). What the parts do
against the real servers is the integration tests' (``tests/integration``, the goldens among them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_s3ch.core.errors import NothingMatchedError
from airflow_provider_s3ch.core.freshness import Standing
from airflow_provider_s3ch.core.ledger import Chunk, ChunkStart
from airflow_provider_s3ch.core.ledger_rows import unit_id
from airflow_provider_s3ch.core.models import LoadMetrics, LoadRequest, Manifest, S3Object
from airflow_provider_s3ch.core.plan import make_plan
from airflow_provider_s3ch.core.recovery import QueryId
from airflow_provider_s3ch.core.schema import Column
from airflow_provider_s3ch.core.server_models import ServerProfile, TableInfo
from airflow_provider_s3ch.errors import LoadError
from airflow_provider_s3ch.load.complete import Inserted, LedgerChunk
from airflow_provider_s3ch.load.insert import Fitted, PlannedInsert
from airflow_provider_s3ch.load.report import DeferLoad, Loaded, NothingNew, nothing_new_report
from airflow_provider_s3ch.load.run import LoadRun, RunOptions, RunParts
from airflow_provider_s3ch.load.target import Listed, Prefetched, TargetFacts

LOG = logging.getLogger("test-orchestration")
STEM = "ab12cd34ef56ab12cd34"
PROFILE = ServerProfile(version="26.9.2.1", cores=4, memory_bytes=16 << 30,
                        table=TableInfo(database="default", name="events", engine="MergeTree",
                                        partition_key="toYYYYMM(day)"))
COLUMNS = [Column(name="day", type="Date"), Column(name="n", type="UInt64")]


def objects(count: int) -> list[S3Object]:
    return [S3Object(key=f"data/part-{i:02d}.parquet", size=1000 + i, etag=f'"e{i}"') for i in range(count)]


def manifest(files: list[S3Object]) -> Manifest:
    return Manifest(bucket="bucket", pattern="data/*.parquet", prefix="data/", objects=files, format="Parquet")


@dataclass
class World:
    """What the stand-ins answer, and what they were asked, in order."""

    files: list[S3Object] = field(default_factory=lambda: objects(4))
    #: The ledger's chunks (None: the ledger has every file as one insert); the numbers another load took.
    chunks: list[Chunk] | None = None
    taken: set[int] = field(default_factory=set)
    #: An insert fails with this error at the n-th insert (1-based).
    fail_at: int | None = None
    listing_error: Exception | None = None
    #: How many times the ledger's heartbeat reads as lapsed after a chunk's plan; how often it was stopped.
    lapses: int = 0
    beats_stopped: int = 0
    calls: list[str] = field(default_factory=list)
    hook: Any = None

    def parts(self) -> RunParts:
        world = self

        class Hook:
            database, host, port, s3_endpoint_url, address = "default", "ch.local", 9000, None, "ch.local:9000"
            closed = False

            def close(self) -> None:
                self.closed = True
                world.calls.append("close")

        class Source:
            endpoint_url = "http://s3.local"

            def client(self) -> object:
                return object()

            def credentials(self) -> None:
                return None

        def listing(client: object, request: LoadRequest, on_listed: Any = None) -> Manifest:
            world.calls.append("list")
            if world.listing_error is not None:
                raise world.listing_error
            listed = manifest(list(world.files))
            if on_listed is not None:
                on_listed(listed)
            return listed

        class Target:
            def __init__(self, hook: Any, request: LoadRequest, spec: Any, log: logging.Logger) -> None:
                self.hook, self.request = hook, request

            def history_key(self, fmt: str) -> str:
                return f"default.events|{fmt}"

            def source_url(self, endpoint_url: str | None, region: str | None) -> str:
                return f"{endpoint_url}/bucket/data/*.parquet"

            def read_ahead(self, listed: Any, *, early_key: str | None = None) -> Prefetched:
                got = listed()
                return Prefetched(profile=PROFILE, past=[] if got is not None else None)

            def prepare(self, listed: Listed, learned: Any, ahead: Prefetched | None) -> TargetFacts:
                world.calls.append(f"target {len(listed.manifest.objects)} files")
                plan = make_plan(self.request, listed.manifest, PROFILE, source_url=listed.url)
                return TargetFacts(profile=PROFILE, plan=plan, changes={"created": None}, columns=COLUMNS)

        class Ledger:
            def __init__(self, hook: Any, request: LoadRequest, query_id: QueryId, *, claim_timeout: float,
                         heartbeat: float, log: logging.Logger) -> None:
                self.query_id, self.request = query_id, request
                self.selection = SimpleNamespace(chunks=len(world.chunks or []))
                self.beat = SimpleNamespace(fresh=self.fresh, stop=self.stop)

            @staticmethod
            def fresh() -> bool:
                world.lapses -= 1
                return world.lapses < 0

            @staticmethod
            def stop() -> None:
                world.beats_stopped += 1

            def prepare(self, listed: Manifest, url: str) -> list[Chunk]:
                world.calls.append("claim")
                self.url = url
                return list(world.chunks) if world.chunks is not None else [Chunk(files=listed.objects)]

            def begin(self, chunk: Chunk) -> ChunkStart | None:
                if chunk.number in world.taken:
                    return None
                return ChunkStart(chunk, manifest(chunk.files), f"{self.url}#{chunk.number}")

            def query_id_of(self, chunk: Chunk) -> QueryId:
                return QueryId(stem=unit_id(self.query_id.stem, chunk.number), try_number=self.query_id.try_number)

            def check(self, steps: Any, plan: Any) -> None:
                assert steps.staging is not None

            def resume(self, resume: Any, chunk: Chunk) -> Any:
                return resume

            def summary(self) -> dict[str, Any]:
                return {"table": "default._s3ch_ledger", "new": len(world.files)}

            def standing(self) -> Standing:
                return Standing(list(world.files), [], [])

            def nothing_new(self, wall_ms: int, freshness: Any = None) -> Any:
                world.calls.append("nothing new")
                if self.request.skip_when_empty:
                    raise NothingNew("no new file")
                return nothing_new_report("default.events", "append", wall_ms, self.summary(), dry_run=False)

            def abandon(self) -> None:
                world.calls.append("abandon")

        class Inserter:
            queries = None
            running = None

            def __init__(self, hook: Any, credentials: Any, log: logging.Logger) -> None:
                self.inserts = 0

            def within_cap(self, planned: PlannedInsert, nodes: Any, *, cores: int, user: Any, tag: Any) -> Fitted:
                world.calls.append(f"insert {planned.query_id}")
                self.inserts += 1
                if world.fail_at == self.inserts:
                    raise LoadError("the insert failed")
                return Fitted(tag(planned.plan, "plan"), planned.rendered, [])

            def start_deferred(self, rendered: Any, query_id: QueryId, load: Any) -> None:
                world.calls.append(f"defer {query_id}")
                raise DeferLoad(kind="insert", query_ids=[str(query_id)], nodes=[], load=load.model_dump(mode="json"))

            def kill(self) -> None:
                pass

        class Completion:
            def __init__(self, hook: Any, queries: Any, log: logging.Logger) -> None:
                pass

            def insert(self, one: Loaded, inserted: Inserted, *, ledger: LedgerChunk | None = None,
                       metrics: LoadMetrics | None = None) -> Loaded:
                world.calls.append(f"complete {inserted.query_id}" + (" (ledger)" if ledger is not None else ""))
                rows = 10 * len(one.files or [])
                return one.done(LoadMetrics(query_id=inserted.query_id, written_rows=rows, written_bytes=8 * rows,
                                            read_rows=rows, read_bytes=8 * rows, duration_ms=5, memory_usage=1 << 20),
                                ["200807"])

        def clickhouse() -> Any:
            world.hook = Hook()
            return world.hook

        return RunParts(clickhouse=clickhouse, s3=Source, listing=listing, target=Target, ledger=Ledger,
                        inserter=Inserter, completion=Completion)


def run(world: World, *, defers: bool = False, try_number: int = 1, **request: Any) -> Any:
    options = RunOptions(table_spec=None, defers=defers, earlier_try_timeout=60.0, claim_timeout=3600.0,
                         claim_heartbeat=5.0, learn_from_history=False)
    load = LoadRun(LoadRequest(s3_uri="s3://bucket/data/*.parquet", table="events", **request), options, LOG,
                   world.parts())
    return load, load.run(QueryId(stem=STEM, try_number=try_number), first_try=1)


def chunked(world: World, sizes: list[int]) -> list[Chunk]:
    files, out, at = world.files, [], 0
    for n, size in enumerate(sizes, start=1):
        out.append(Chunk(number=n, total=len(sizes), files=files[at:at + size]))
        at += size
    return out


def test_a_load_lists_plans_inserts_and_completes_once_and_reports_what_the_insert_wrote() -> None:
    world = World()
    load, report = run(world)
    assert world.calls == ["list", "target 4 files", f"insert s3ch-{STEM}-try1", f"complete s3ch-{STEM}-try1",
                           "close"]
    assert report.kind == "load" and report.written_rows == 40 and report.partitions == ["200807"]
    assert set(report.phases_ms) >= {"s3", "target", "resume", "insert", "complete", "lineage", "other"}
    assert load.lineage is not None and [o.key for o in load.lineage.objects] == [o.key for o in world.files]


@pytest.mark.parametrize("skip_when_empty", [True, False])
def test_no_matching_file_is_a_skip_only_under_skip_when_empty(skip_when_empty: bool) -> None:
    world = World(listing_error=NothingMatchedError("no file matches s3://bucket/data/*.parquet; check the glob"))
    with pytest.raises(NothingNew if skip_when_empty else NothingMatchedError) as raised:
        run(world, skip_when_empty=skip_when_empty)
    if skip_when_empty:
        assert str(raised.value) == "no file matches s3://bucket/data/*.parquet: skipped (skip_when_empty=True)"
    assert world.calls == ["list", "close"]


@pytest.mark.parametrize("taken", [set(), {1, 2}])
def test_a_ledger_run_without_a_new_file_reports_nothing_new_and_inserts_nothing(taken: set[int]) -> None:
    world = World(taken=taken)
    world.chunks = [] if not taken else chunked(world, [2, 2])
    _, report = run(world, skip_loaded=True, max_files_per_load=2)
    assert report.kind == "nothing_new" and report.written_rows == 0 and report.files == 0
    assert world.calls == ["list", "claim", "nothing new", "close"]


def test_chunks_are_inserted_in_order_each_completed_before_the_next_and_a_taken_one_is_passed() -> None:
    world = World(files=objects(5))
    world.chunks, world.taken = chunked(world, [2, 2, 1]), {2}
    _, report = run(world, skip_loaded=True, max_files_per_load=2)
    ids = [str(QueryId(stem=unit_id(STEM, n), try_number=1)) for n in (1, 3)]
    assert world.calls == ["list", "claim", "target 2 files", f"insert {ids[0]}", f"complete {ids[0]} (ledger)",
                           "target 1 files", f"insert {ids[1]}", f"complete {ids[1]} (ledger)", "close"]
    assert [c["chunk"] for c in report.chunks] == [1, 3] and report.files == 3 and report.written_rows == 30
    assert report.ledger == {"table": "default._s3ch_ledger", "new": 5}


def test_a_chunk_whose_heartbeat_lapsed_while_it_was_planned_is_begun_and_planned_again_before_its_insert() -> None:
    world = World(files=objects(4), lapses=2)
    world.chunks = chunked(world, [3, 1])
    _, report = run(world, skip_loaded=True, max_files_per_load=3)
    ids = [str(QueryId(stem=unit_id(STEM, n), try_number=1)) for n in (1, 2)]
    assert world.calls == ["list", "claim", "target 3 files", "target 3 files", "target 3 files", f"insert {ids[0]}",
                           f"complete {ids[0]} (ledger)", "target 1 files", f"insert {ids[1]}",
                           f"complete {ids[1]} (ledger)", "close"]
    assert report.files == 4 and world.beats_stopped == 1


@pytest.mark.parametrize("fail_at", [1, 2])
def test_the_heartbeat_stops_once_when_the_load_fails(fail_at: int) -> None:
    world = World(fail_at=fail_at)
    world.chunks = chunked(world, [2, 2])
    with pytest.raises(LoadError):
        run(world, skip_loaded=True, max_files_per_load=2)
    assert world.beats_stopped == 1 and world.calls[-2:] == ["abandon", "close"]


@pytest.mark.parametrize("ledger", [False, True])
def test_a_dry_run_plans_the_first_insert_and_inserts_nothing(ledger: bool) -> None:
    world = World()
    if ledger:
        world.chunks = chunked(world, [3, 1])
    _, report = run(world, dry_run=True, **({"skip_loaded": True, "max_files_per_load": 3} if ledger else {}))
    assert report.kind == "dry_run" and report.dry_run is True and "INSERT INTO" in report.sql
    assert not [c for c in world.calls if c.startswith(("insert", "complete"))]
    if ledger:
        assert report.chunks == [c.describe() for c in world.chunks] and report.ledger is not None
        assert world.calls == ["list", "claim", "target 3 files", "close"]
    else:
        assert world.calls == ["list", "target 4 files", "close"]


def test_a_deferrable_load_signals_the_deferral_with_what_the_resumed_task_needs() -> None:
    world = World()
    with pytest.raises(DeferLoad) as raised:
        run(world, defers=True)
    signal = raised.value
    assert signal.kind == "insert" and signal.query_ids == [f"s3ch-{STEM}-try1"]
    assert signal.load is not None and [o["key"] for o in signal.load["objects"]] == [o.key for o in world.files]
    assert signal.load["query_id"] == f"s3ch-{STEM}-try1" and signal.load["bucket"] == "bucket"
    assert set(signal.load["phases_ms"]) >= {"s3", "target", "resume"}
    assert world.calls == ["list", "target 4 files", f"defer s3ch-{STEM}-try1", "close"]


@pytest.mark.parametrize("fail_at", [1, 2])
def test_a_failed_insert_gives_the_ledger_claims_back_once_and_raises_its_error(fail_at: int) -> None:
    world = World(fail_at=fail_at)
    world.chunks = chunked(world, [2, 2])
    with pytest.raises(LoadError, match="the insert failed"):
        run(world, skip_loaded=True, max_files_per_load=2)
    assert world.calls.count("abandon") == 1 and world.calls[-2:] == ["abandon", "close"]
    assert len([c for c in world.calls if c.startswith("complete")]) == fail_at - 1


def test_a_failed_plain_load_has_no_claims_to_give_back() -> None:
    world = World(fail_at=1)
    with pytest.raises(LoadError):
        run(world)
    assert "abandon" not in world.calls and world.calls[-1] == "close" and world.hook.closed
