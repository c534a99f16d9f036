"""The file ledger's pure decisions: which files a load takes, what a row means, whose claim holds."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import InvalidRequestError, PlanError
from airflow_provider_s3ch.core.glob import expand_keys, key_url, object_url, split_archive
from airflow_provider_s3ch.core.ledger import (
    KEYS_SHOWN,
    ChangedFilesError,
    Selection,
    assign_chunks,
    chunks_of,
    confirm,
    loaded_versions,
    resume_with_ledger,
    select_files,
    split_chunks,
)
from airflow_provider_s3ch.core.ledger_reads import key_list_pattern, narrow_manifest, summary
from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME, check_request, check_steps, ledger_ref
from airflow_provider_s3ch.core.ledger_rows import (
    WHOLE_FILE as WHOLE,
)
from airflow_provider_s3ch.core.ledger_rows import (
    LedgerRow,
    LoadActivity,
    activity,
    row_status,
    staging_name,
    unit_id,
)
from airflow_provider_s3ch.core.ledger_sql import ledger_engine_problem, render_create_ledger, render_read, state_rows
from airflow_provider_s3ch.core.models import LoadRequest, Manifest, S3Object, TableRef
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX, Resume, plan_steps
from airflow_provider_s3ch.core.server_models import TableInfo

ME, OTHER, THIRD = "aaaa", "bbbb", "cccc"
T = 3600.0


def obj(key: str, etag: str = "e1", size: int = 10) -> S3Object:
    return S3Object(key=key, size=size, etag=etag, format="CSV")


def row(key: str, state: str, load: str = OTHER, *, etag: str = "e1", age: float = 1.0, block: int = 1) -> LedgerRow:
    return LedgerRow(key=key, etag=etag, load_id=load, query_id=f"s3ch-{load}-try1", state=state, age_s=age,
                     block=block, size=10)


def request(**kw: object) -> LoadRequest:
    base: dict[str, object] = {"s3_uri": "s3://b/in/*.csv", "table": "db.t", "skip_loaded": True}
    return LoadRequest(**{**base, **kw})


# ---------------------------------------------------------------------- arguments


def test_overwrite_and_append_reload_are_refused_before_anything_runs() -> None:
    with pytest.raises(InvalidRequestError, match="overwrite"):
        check_request(request(mode="overwrite"))
    with pytest.raises(InvalidRequestError, match="old rows would stay"):
        check_request(request(mode="append", on_changed="reload"))
    check_request(request(mode="replace_partitions", on_changed="reload"))
    check_request(request(mode="append", on_changed="skip"))
    check_request(request(mode="overwrite", skip_loaded=False))  # the ledger is not used


def test_ledger_table_defaults_to_the_targets_database() -> None:
    assert ledger_ref(request(), "x") == TableRef(database="db", name=LEDGER_NAME)
    assert ledger_ref(request(table="t"), "conn_db") == TableRef(database="conn_db", name=LEDGER_NAME)
    assert ledger_ref(request(ledger_table="files"), "x") == TableRef(database="db", name="files")
    assert ledger_ref(request(ledger_table="meta.files"), "x") == TableRef(database="meta", name="files")
    with pytest.raises(InvalidRequestError):
        check_request(request(ledger_table="a.b.c"))


def test_only_a_load_through_a_staging_table_can_use_the_ledger() -> None:
    local = TableInfo(database="db", name="t", engine="MergeTree")
    check_steps(plan_steps("append", local, "ab"), strategy="single")
    check_steps(plan_steps("append", local, "ab"), strategy="distributed")  # s3Cluster into the staging table
    with pytest.raises(PlanError, match="direct insert"):
        check_steps(plan_steps("append", local.model_copy(update={"dependent_views": ["db.mv"]}), "ab"),
                    strategy="single")
    with pytest.raises(PlanError, match="direct insert"):
        check_steps(plan_steps("append", TableInfo(database="db", name="t", engine="Distributed"), "ab"),
                    strategy="single")


# ---------------------------------------------------------------------- what a row means


@pytest.mark.parametrize(
    ("state", "load", "age", "staging", "running", "expected"),
    [
        ("loaded", OTHER, 1, False, False, "loaded"),
        ("released", OTHER, 1, True, True, "released"),
        ("pending", OTHER, 99999, True, False, "in_flight"),  # its retry finishes it
        ("pending", OTHER, 1, False, True, "committed"),  # staging gone: the partitions moved
        ("claimed", OTHER, 1, False, False, "live"),  # between the claim and the insert
        ("claimed", OTHER, T + 1, False, False, "stale"),  # its worker died before inserting
        ("claimed", OTHER, T + 1, True, False, "live"),  # its staging table is there
        ("claimed", OTHER, T + 1, False, True, "live"),  # its query runs
        ("claimed", ME, T / 2 + 1, False, False, "stale"),  # a load keeps its own claims half as long
        ("claimed", ME, T / 2 - 1, False, False, "live"),
    ],
)
def test_row_status(state: str, load: str, age: float, staging: bool, running: bool, expected: str) -> None:
    facts = LoadActivity(staging=frozenset({load} if staging else ()), running=frozenset({load} if running else ()))
    assert row_status(row("k", state, load, age=age), facts, own=ME, claim_timeout=T) == expected


# ---------------------------------------------------------------------- which files a load takes


def test_a_first_try_takes_the_files_no_load_holds() -> None:
    listing = [obj("in/a.csv"), obj("in/b.csv"), obj("in/c.csv"), obj("in/d.csv"), obj("in/e.csv")]
    rows = [
        row("in/a.csv", "loaded"),
        row("in/b.csv", "claimed", OTHER),  # live: another run is about to load it
        row("in/c.csv", "claimed", THIRD, age=T + 5),  # stale: its load died
        row("in/d.csv", "pending", THIRD),  # staging gone: committed
    ]
    sel = select_files(listing, rows, LoadActivity(), own=ME, claim_timeout=T)
    assert [o.key for o in sel.files] == ["in/c.csv", "in/e.csv"] == [o.key for o in sel.claim]
    assert sel.skipped_loaded == ["in/a.csv", "in/d.csv"] and sel.skipped_claimed == ["in/b.csv"]
    assert [r.key for r in sel.committed] == ["in/d.csv"]
    assert not sel.retry and sel.new == ["in/c.csv", "in/e.csv"]


def test_a_file_whose_load_still_finishes_is_held_not_reloaded() -> None:
    rows = [row("in/a.csv", "pending", OTHER)]
    sel = select_files([obj("in/a.csv")], rows, LoadActivity(staging=frozenset({OTHER})), own=ME)
    assert sel.files == [] and sel.skipped_claimed == ["in/a.csv"] and sel.committed == []


@pytest.mark.parametrize("on_changed", ["fail", "skip", "reload"])
def test_a_changed_etag_is_a_new_version(on_changed: str) -> None:
    listing = [obj("in/a.csv", etag="e2"), obj("in/b.csv")]
    rows = [row("in/a.csv", "loaded", etag="e1")]
    if on_changed == "fail":
        with pytest.raises(ChangedFilesError, match="in/a.csv"):
            select_files(listing, rows, LoadActivity(), own=ME, on_changed=on_changed)
        return
    sel = select_files(listing, rows, LoadActivity(), own=ME, on_changed=on_changed)
    if on_changed == "skip":
        assert [o.key for o in sel.files] == ["in/b.csv"] and sel.skipped_changed == ["in/a.csv"]
    else:
        assert [o.key for o in sel.files] == ["in/a.csv", "in/b.csv"] and sel.reloaded == ["in/a.csv"]
        assert sel.new == ["in/b.csv"]


def test_the_changed_error_names_a_bounded_list() -> None:
    listing = [obj(f"in/{i:03d}.csv", etag="new") for i in range(KEYS_SHOWN + 5)]
    rows = [row(o.key, "loaded", etag="old") for o in listing]
    with pytest.raises(ChangedFilesError, match="and 5 more") as err:
        select_files(listing, rows, LoadActivity(), own=ME)
    assert str(err.value).count("in/") == KEYS_SHOWN


def test_a_retry_reads_what_its_earlier_try_held_and_nothing_new() -> None:
    listing = [obj("in/a.csv"), obj("in/b.csv"), obj("in/new.csv")]
    rows = [row("in/a.csv", "claimed", ME, block=7), row("in/b.csv", "claimed", ME, block=7)]
    sel = select_files(listing, rows, LoadActivity(), own=ME, claim_timeout=T)
    assert sel.retry and [o.key for o in sel.files] == ["in/a.csv", "in/b.csv"] and sel.claim == []


def test_a_retry_after_a_completed_load_has_nothing_to_do() -> None:
    rows = [row("in/a.csv", "loaded", ME), row("in/b.csv", "pending", ME)]  # b: staging gone, committed
    sel = select_files([obj("in/a.csv"), obj("in/b.csv"), obj("in/c.csv")], rows, LoadActivity(), own=ME)
    assert sel.retry and sel.files == [] and [r.key for r in sel.committed] == ["in/b.csv"]


def test_a_retry_whose_file_is_gone_keeps_it_only_while_its_staging_table_may_hold_it() -> None:
    rows = [row("in/a.csv", "claimed", ME), row("in/gone.csv", "claimed", ME)]
    staged = select_files([obj("in/a.csv")], rows, LoadActivity(staging=frozenset({ME})), own=ME, fmt="CSV")
    assert [o.key for o in staged.files] == ["in/a.csv", "in/gone.csv"] and staged.release == []
    assert staged.files[1].format == "CSV" and staged.finished_inserts == {}
    fresh = select_files([obj("in/a.csv")], rows, LoadActivity(), own=ME)
    assert [o.key for o in fresh.files] == ["in/a.csv"] and [r.key for r in fresh.release] == ["in/gone.csv"]


def test_pending_rows_with_a_staging_table_name_the_insert_that_finished() -> None:
    rows = [row("in/a.csv", "pending", ME)]
    sel = select_files([obj("in/a.csv")], rows, LoadActivity(staging=frozenset({ME})), own=ME)
    assert sel.retry and sel.finished_inserts == {0: f"s3ch-{ME}-try1"}


def test_stale_own_claims_are_claimed_afresh_or_released() -> None:
    rows = [row("in/a.csv", "claimed", ME, age=T), row("in/gone.csv", "claimed", ME, age=T)]
    sel = select_files([obj("in/a.csv"), obj("in/b.csv")], rows, LoadActivity(), own=ME, claim_timeout=T)
    assert not sel.retry and [o.key for o in sel.claim] == ["in/a.csv", "in/b.csv"]
    # every stale row is released first; the claim written after it is the newer version of a.csv's row
    assert sorted(r.key for r in sel.release) == ["in/a.csv", "in/gone.csv"]


def test_a_key_listed_twice_is_taken_once() -> None:
    sel = select_files([obj("in/a.csv"), obj("in/a.csv")], [], LoadActivity(), own=ME)
    assert [o.key for o in sel.files] == ["in/a.csv"]


# ---------------------------------------------------------------------- whose claim holds


def test_the_earliest_live_claim_holds() -> None:
    files = [obj("in/a.csv"), obj("in/b.csv"), obj("in/c.csv"), obj("in/d.csv")]
    rows = [
        row("in/a.csv", "claimed", ME, block=5), row("in/a.csv", "claimed", OTHER, block=4),  # other's is earlier
        row("in/b.csv", "claimed", ME, block=5), row("in/b.csv", "claimed", OTHER, block=6),  # mine is earlier
        row("in/c.csv", "claimed", ME, block=5), row("in/c.csv", "claimed", OTHER, block=2, age=T + 1),  # stale
        row("in/d.csv", "claimed", ME, block=5), row("in/d.csv", "loaded", OTHER, block=9),  # loaded meanwhile
    ]
    kept, lost = confirm(files, rows, LoadActivity(), own=ME, claim_timeout=T)
    assert [o.key for o in kept] == ["in/b.csv", "in/c.csv"] and [o.key for o in lost] == ["in/a.csv", "in/d.csv"]


def test_a_claim_that_is_not_there_holds_nothing() -> None:
    kept, lost = confirm([obj("in/a.csv")], [row("in/a.csv", "released", ME)], LoadActivity(), own=ME)
    assert kept == [] and [o.key for o in lost] == ["in/a.csv"]


@st.composite
def _claims(draw: st.DrawFn) -> tuple[list[str], list[list[int]], list[int]]:
    loads = [f"{i:04x}" for i in range(draw(st.integers(2, 5)))]
    files = draw(st.lists(st.integers(0, 5), min_size=1, max_size=6, unique=True))
    wanted = [draw(st.lists(st.sampled_from(files), unique=True)) for _ in loads]
    order = draw(st.permutations(list(range(len(loads)))))  # the order in which the claims commit
    return loads, wanted, order


@settings(max_examples=300, deadline=None)
@given(_claims(), st.data())
def test_no_two_loads_keep_the_same_file_whatever_the_interleaving(claims, data) -> None:
    """Each load commits its claims (block numbers in commit order), then reads the ledger at some later point:
    it sees every claim committed before its own and any number of those committed after. At most one load
    keeps each file; when every load sees every claim, exactly one keeps each claimed file."""
    loads, wanted, order = claims
    block = {loads[i]: n + 1 for n, i in enumerate(order)}
    rows = [row(f"in/{f}.csv", "claimed", load, block=block[load])
            for load, files in zip(loads, wanted, strict=True) for f in files]
    for full_view in (False, True):
        keepers: dict[str, list[str]] = {}
        for load, files in zip(loads, wanted, strict=True):
            horizon = len(loads) if full_view else data.draw(st.integers(block[load], len(loads)))
            seen = [r for r in rows if r.block <= horizon]
            kept, _ = confirm([obj(f"in/{f}.csv") for f in files], seen, LoadActivity(), own=load)
            for o in kept:
                keepers.setdefault(o.key, []).append(load)
        assert all(len(v) == 1 for v in keepers.values()), keepers
        if full_view:
            assert set(keepers) == {f"in/{f}.csv" for files in wanted for f in files}


_KEY = st.text(st.sampled_from("ab/_-.%# +=éü0"), min_size=1, max_size=12).filter(
    lambda k: not k.startswith("/") and "//" not in k and "::" not in k
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["in", "ä x", "p%", "y#"]), min_size=1, max_size=3), min_size=0),
       st.lists(st.tuples(st.sampled_from(["claimed", "pending", "loaded", "released"]),
                          st.sampled_from([OTHER, THIRD]),
                          st.sampled_from(["e1", "e2"]), st.booleans(), st.booleans()), max_size=12),
       st.sampled_from(["skip", "reload"]))
def test_every_listed_file_gets_exactly_one_outcome(paths, states, on_changed) -> None:
    keys = sorted({"/".join(p) + ".csv" for p in paths})
    listing = [obj(k, etag="e1") for k in keys]
    rows = [row(keys[i % len(keys)], s, load, etag=etag, age=T + 1 if old else 1).model_copy(update={"version": i})
            for i, (s, load, etag, old, _) in enumerate(states)] if keys else []
    staged = frozenset(load for (_, load, _, _, st_) in states if st_)
    sel = select_files(listing, rows, LoadActivity(staging=staged), own=ME, on_changed=on_changed, claim_timeout=T)
    outcomes = [o.key for o in sel.files] + sel.skipped_loaded + sel.skipped_claimed + sel.skipped_changed
    assert sorted(outcomes) == keys
    # the version in the target: a key's newest loaded (or committed) row; an earlier one put back is changed
    in_target = {}
    for r in rows:
        if row_status(r, LoadActivity(staging=staged), own=ME, claim_timeout=T) in ("loaded", "committed"):
            in_target[r.key] = r.etag
    assert not any(in_target.get(o.key) == o.etag for o in sel.files)  # nothing loaded twice
    assert set(sel.reloaded) <= set(in_target)


# ---------------------------------------------------------------------- what the insert reads


@settings(max_examples=200, deadline=None)
@given(st.lists(_KEY, min_size=1, max_size=8, unique=True))
def test_a_key_list_makes_clickhouse_read_exactly_those_keys(keys) -> None:
    body, pattern = key_list_pattern(keys, "in/*.csv")
    assert body == pattern and expand_keys(pattern) == keys  # ClickHouse's expansion: direct reads, no listing
    url = object_url("b", "in/*.csv", endpoint_url="http://s3:9000", region=None)
    read = key_url(url, "in/*.csv", body)
    assert unquote(read.removeprefix("http://s3:9000/b/")) == pattern  # the server decodes the path back


def test_an_archive_glob_keeps_its_member_pattern() -> None:
    body, pattern = key_list_pattern(["a/1.zip", "a/2.zip"], "a/*.zip :: *.csv")
    assert (body, pattern) == ("{a/1.zip,a/2.zip}", "{a/1.zip,a/2.zip} :: *.csv")
    assert split_archive(pattern) == ("{a/1.zip,a/2.zip}", "*.csv")


@pytest.mark.parametrize("bad", ["in/a,b.csv", "in/{x}.csv", "in/a*.csv", "in/a?.csv", "in/a::b.csv", "in/a\nb.csv"])
def test_a_key_a_list_cannot_name_is_refused_with_its_name(bad: str) -> None:
    with pytest.raises(InvalidRequestError, match="cannot name 1 of them"):
        key_list_pattern(["in/ok.csv", bad], "in/*.csv")


def test_the_narrowed_manifest_scales_the_footer_estimate() -> None:
    objects = [obj("in/a.csv", size=100), obj("in/b.csv", size=300)]
    manifest = Manifest(bucket="b", pattern="in/*.csv", prefix="in/", objects=objects, format="CSV",
                        uncompressed_bytes=4000)
    narrowed = narrow_manifest(manifest, [objects[1]], "in/b.csv")
    assert narrowed.file_count == 1 and narrowed.uncompressed_bytes == 3000 and narrowed.pattern == "in/b.csv"


# ---------------------------------------------------------------------- the table and the XCom


def test_the_ledger_table_keeps_the_latest_state_and_the_claims_order() -> None:
    ddl = render_create_ledger(TableRef(database="db", name=LEDGER_NAME))
    assert "CREATE TABLE IF NOT EXISTS `db`.`_s3ch_ledger`" in ddl and "ReplacingMergeTree(version)" in ddl
    assert "enable_block_number_column = 1" in ddl
    assert ledger_engine_problem("ReplacingMergeTree", "ReplacingMergeTree(version) SETTINGS enable_block_number_column"
                                 " = 1, index_granularity = 8192") is None
    assert "ReplacingMergeTree" in (ledger_engine_problem("MergeTree", "MergeTree") or "")
    assert "enable_block_number_column" in (ledger_engine_problem("ReplacingMergeTree", "ReplacingMergeTree") or "")
    assert "argMax(_block_number, version)" in render_read(TableRef(database="db", name="l"), "_files")


def test_state_rows_carry_the_claim_time_of_ledger_rows() -> None:
    (claim,) = state_rows("db.t", "b", [obj("k")], load_id=ME, query_id="q", state="claimed")
    assert claim == ("db.t", "b", "k", "e1", 10, None, 0, ME, "q", "claimed", None, [])
    (later,) = state_rows("db.t", "b", [row("k", "claimed", ME)], load_id=ME, query_id="q2", state="loaded", rows=5,
                          partitions=["202401"])
    assert later[:12] == ("db.t", "b", "k", "e1", 10, None, 0, ME, "q2", "loaded", 5, ["202401"]) and len(later) == 13
    # a later state keeps the partitions its row records unless new ones are given
    kept = row("k", "pending", ME).model_copy(update={"partitions": ("7",)})
    (done,) = state_rows("db.t", "b", [kept], load_id=ME, query_id="q3", state="loaded")
    assert done[11] == ["7"]


def test_the_summary_counts_everything_and_shows_a_bounded_list() -> None:
    listing = [obj(f"in/{i:03d}.csv") for i in range(KEYS_SHOWN * 2)]
    rows = [row(o.key, "loaded") for o in listing[:KEYS_SHOWN + 3]]
    sel = select_files(listing, rows, LoadActivity(), own=ME)
    kept = sel.model_copy(update={"files": sel.files[:-1]})  # the last claim was lost to another load
    out = summary(TableRef(database="db", name=LEDGER_NAME), kept, load_id=ME, lost=[listing[-1]])
    assert out["new"] == KEYS_SHOWN - 4 and out["skipped_loaded"] == KEYS_SHOWN + 3 and out["skipped_claimed"] == 1
    assert out["skipped"] == KEYS_SHOWN + 4 and len(out["skipped_loaded_keys"]) == KEYS_SHOWN
    assert out["skipped_claimed_keys"] == [listing[-1].key]
    assert out["new_keys"] == [o.key for o in listing[KEYS_SHOWN + 3 : -1]]


# ---------------------------------------------------------------------- chunks


def crow(key: str, state: str, chunk: int, load: str = ME, *, age: float = 1.0) -> LedgerRow:
    return LedgerRow(key=key, etag="e1", chunk=chunk, load_id=load, query_id=f"s3ch-{unit_id(load, chunk)}-try1",
                     state=state, age_s=age, size=10)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(min_value=1, max_value=1000), max_size=40),
       max_files=st.one_of(st.none(), st.integers(min_value=1, max_value=7)),
       max_bytes=st.one_of(st.none(), st.integers(min_value=1, max_value=3000)))
def test_chunks_hold_every_file_once_in_key_order_within_the_limits(sizes, max_files, max_bytes) -> None:
    files = [obj(f"in/{n:03d}.csv", size=size) for n, size in reversed(list(enumerate(sizes)))]
    chunks = split_chunks(files, max_files=max_files, max_bytes=max_bytes)
    assert [o.key for c in chunks for o in c] == sorted(o.key for o in files)
    assert all(c for c in chunks)
    for c in chunks:
        assert max_files is None or len(c) <= max_files
        assert max_bytes is None or len(c) == 1 or sum(o.size for o in c) <= max_bytes
    for a, b in zip(chunks, chunks[1:], strict=False):  # greedy: a chunk closes only when the next file would not fit
        assert (max_files is not None and len(a) == max_files) or (
            max_bytes is not None and sum(o.size for o in a) + b[0].size > max_bytes)


def test_a_first_try_numbers_its_chunks_from_one() -> None:
    sel = select_files([obj(f"in/{n}.csv") for n in range(5)], [], LoadActivity(), own=ME)
    sel = assign_chunks(sel, max_files=2, max_bytes=None)
    assert sel.chunks == 3 and [sel.chunk_of[f"in/{n}.csv"] for n in range(5)] == [1, 1, 2, 2, 3]
    chunks = chunks_of(sel)
    assert [(c.number, len(c.files)) for c in chunks] == [(1, 2), (2, 2), (3, 1)]
    assert chunks[0].describe() == "chunk 1/3: 2 files, 20 B"
    assert state_rows("db.t", "b", sel.files[:1], load_id=ME, query_id="q", state="claimed",
                      chunk_of=sel.chunk_of)[0][6] == 1


def test_a_chunk_has_its_own_unit_and_staging_table() -> None:
    assert unit_id("ab" * 10) == "ab" * 10 and unit_id("ab" * 10, 8) == "ab" * 10 + "000008"
    assert staging_name("ab" * 10, 255) == f"{STAGING_PREFIX}{'ab' * 10}0000ff"
    assert crow("in/a.csv", "pending", 3).unit == f"{ME}000003"


def test_a_retry_resumes_at_the_first_chunk_not_committed() -> None:
    """Chunks 1-7 committed (7 staged away), chunk 8 pending with its staging table, 9-10 claimed."""
    rows = [crow(f"in/{n:02d}.csv", "loaded", n) for n in range(1, 7)]
    rows += [crow("in/07.csv", "pending", 7), crow("in/08.csv", "pending", 8)]
    rows += [crow("in/09.csv", "claimed", 9), crow("in/10.csv", "claimed", 10)]
    listing = [obj(f"in/{n:02d}.csv") for n in range(1, 12)]  # 11.csv arrived since: not this load's
    sel = select_files(listing, rows, LoadActivity(staging=frozenset({unit_id(ME, 8)})), own=ME)
    assert sel.retry and sel.chunks == 10
    assert [r.key for r in sel.committed] == ["in/07.csv"]
    assert [(c.number, [o.key for o in c.files]) for c in chunks_of(sel)] == [
        (8, ["in/08.csv"]), (9, ["in/09.csv"]), (10, ["in/10.csv"])]
    assert sel.finished_inserts == {8: f"s3ch-{unit_id(ME, 8)}-try1"}


def test_a_load_is_busy_while_any_of_its_chunks_has_a_staging_table() -> None:
    facts = LoadActivity(staging=frozenset({unit_id(OTHER, 2)}))
    late = crow("in/x.csv", "claimed", 9, OTHER, age=10 * T)  # a later chunk's claim, old: still live
    assert row_status(late, facts, own=ME, claim_timeout=T) == "live"
    assert row_status(late, LoadActivity(), own=ME, claim_timeout=T) == "stale"
    assert row_status(crow("in/y.csv", "pending", 1, OTHER), facts, own=ME, claim_timeout=T) == "committed"
    assert row_status(crow("in/y.csv", "pending", 2, OTHER), facts, own=ME, claim_timeout=T) == "in_flight"


def test_a_retry_claims_again_what_its_failed_try_gave_back_unless_another_load_holds_it() -> None:
    rows = [crow("in/a.csv", "loaded", 1), crow("in/b.csv", "released", 2), crow("in/c.csv", "released", 3),
            row("in/c.csv", "claimed", OTHER, block=9)]
    sel = select_files([obj("in/a.csv"), obj("in/b.csv"), obj("in/c.csv")], rows, LoadActivity(), own=ME)
    assert sel.retry and [o.key for o in sel.files] == ["in/b.csv"] and [o.key for o in sel.claim] == ["in/b.csv"]
    assert sel.chunk_of == {"in/b.csv": 2} and sel.release == []


def test_chunks_need_the_ledger_and_append() -> None:
    with pytest.raises(InvalidRequestError, match="need skip_loaded=True"):
        check_request(request(skip_loaded=False, max_files_per_load=10))
    with pytest.raises(InvalidRequestError, match="later chunk would replace"):
        check_request(request(mode="replace_partitions", max_bytes_per_load="1GiB"))
    assert request(max_bytes_per_load="1GiB").max_bytes_per_load == 1024**3 and request(max_files_per_load="5").chunked
    with pytest.raises(InvalidRequestError, match="whole number of files"):
        request(max_files_per_load=2.5)


# ---------------------------------------------------------------------- a reload's older versions


def test_a_key_put_back_to_an_earlier_version_is_changed_not_loaded() -> None:
    """e1 loaded, then e2 reloaded over it, then the e1 bytes put back: the target holds e2, so e1 is a
    changed file; e1's old row is replaced (released), and it does not beat this load's claim."""
    old = row("in/a.csv", "loaded", OTHER, etag="e1").model_copy(update={"version": 1})
    new = row("in/a.csv", "loaded", THIRD, etag="e2").model_copy(update={"version": 2})
    with pytest.raises(ChangedFilesError, match="in/a.csv"):
        select_files([obj("in/a.csv", etag="e1")], [old, new], LoadActivity(), own=ME)
    sel = select_files([obj("in/a.csv", etag="e1")], [old, new], LoadActivity(), own=ME, on_changed="reload")
    assert sel.reloaded == ["in/a.csv"] and sel.replaces == [new] and sel.superseded == [old]
    mine = row("in/a.csv", "claimed", ME, etag="e1", block=9)
    kept, lost = confirm([obj("in/a.csv", etag="e1")], [old, new, mine], LoadActivity(), own=ME, claim_timeout=T)
    assert kept == [obj("in/a.csv", etag="e1")] and lost == []
    # the newest loaded version is the loaded one, whichever order the rows come in
    assert select_files([obj("in/a.csv", etag="e2")], [new, old], LoadActivity(), own=ME).skipped_loaded == ["in/a.csv"]


@given(st.lists(st.tuples(st.sampled_from(["e1", "e2", "e3"]), st.sampled_from(["loaded", "released", "claimed"])),
                min_size=1, max_size=6))
def test_the_newest_loaded_row_of_a_key_is_its_version_and_the_others_are_superseded(
    history: list[tuple[str, str]],
) -> None:
    rows = [row("in/a.csv", state, f"l{i:03d}", etag=etag).model_copy(update={"version": i})
            for i, (etag, state) in enumerate(history)]
    status = {id(r): row_status(r, LoadActivity(), own=ME, claim_timeout=T) for r in rows}
    current, superseded = loaded_versions(rows, status)
    loaded = [r for r in rows if r.state == "loaded"]
    assert list(current.values()) == loaded[-1:]
    assert superseded == loaded[:-1]


def test_the_ledger_overrules_the_query_log_on_which_earlier_insert_still_counts() -> None:
    attach = Resume(action="attach", query_ids=["s3ch-aaaa-try1"], reason="try 1 finished")
    fresh = Selection(retry=False)  # the earlier try gave its files up: this one claimed them afresh
    assert resume_with_ledger(attach, fresh, WHOLE).action == "load"
    assert resume_with_ledger(attach, Selection(retry=True), WHOLE) == attach
    finished = Selection(retry=True, finished_inserts={WHOLE: "s3ch-aaaa-try1"})
    load = Resume(action="load", reason="the query log lost it")
    assert resume_with_ledger(load, finished, WHOLE).query_ids == ["s3ch-aaaa-try1"]
    assert resume_with_ledger(load, Selection(retry=True), WHOLE) == load


def test_the_servers_facts_keep_the_named_loads_only() -> None:
    me, other, third = "a" * 20, "b" * 20, "c" * 20  # load ids are query id stems: 20 hex digits
    facts = activity([staging_name(me, 2), staging_name(third)], [f"s3ch-{other}-try3", "s3ch-other query"],
                     [me, other])
    assert facts.staging == {unit_id(me, 2)} and facts.running == {other}
