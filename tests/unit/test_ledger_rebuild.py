"""Which earlier files a partition-safe ``replace_partitions`` reads again, and when it refuses (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.ledger_rebuild import (
    EarlierRow,
    RebuildRefused,
    candidates,
    conflicts,
    plan_rebuild,
    rebuilt_partitions,
    touched,
)
from airflow_provider_s3ch.core.models import S3Object, TableRef
from airflow_provider_s3ch.core.recovery import LoadSteps
from airflow_provider_s3ch.core.staging import RebuildSource, finalize_statements

B = "bucket"


def row(key: str, *partitions: str, etag: str = "e", state: str = "loaded", load: str = "L1", version: int = 1,
        bucket: str = B, block: int = 0) -> EarlierRow:
    return EarlierRow(bucket=bucket, key=key, etag=etag, load_id=load, unit=load, state=state,
                      partitions=partitions, version=version, block=block)


def obj(key: str, etag: str = "e") -> S3Object:
    return S3Object(key=key, size=1, etag=etag)


@given(st.dictionaries(st.sampled_from([f"k{i}" for i in range(8)]),
                       st.lists(st.sampled_from("abcdef"), min_size=0, max_size=3), min_size=0, max_size=8),
       st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3, unique=True))
def test_exactly_the_files_recorded_in_a_touched_partition_are_read_again(
    recorded: dict[str, list[str]], new: list[str],
) -> None:
    rows = [row(k, *ps) for k, ps in recorded.items()]
    listed = {k: obj(k) for k in recorded}
    rebuild = plan_rebuild(new, rows, bucket=B, keys={"new"}, in_flight=set(), listed=listed)
    # a file with no recorded partition (a ledger from before they were kept) may be in any of them
    expected = {k for k, ps in recorded.items() if not ps or set(ps) & set(new)}
    assert {o.key for o in rebuild.files} == expected
    assert set(candidates(rows, new, bucket=B, keys={"new"}, in_flight=set())) == expected
    assert rebuild.partitions == sorted(new) and rebuild.needed == bool(expected)


def test_new_files_without_rows_rebuild_nothing_not_even_with_rows_of_unknown_partitions() -> None:
    rows = [row("legacy"), row("a", "1")]
    assert plan_rebuild([], rows, bucket=B, keys={"new"}, in_flight=set(), listed={}).needed is False
    assert candidates(rows, [], bucket=B, keys={"new"}, in_flight=set()) == []


def test_only_the_latest_version_of_a_file_counts_and_a_reload_replaces_it() -> None:
    rows = [row("a", "1", etag="old", version=1), row("a", "1", etag="new", version=2), row("b", "1")]
    rebuild = plan_rebuild(["1"], rows, bucket=B, keys=set(), in_flight=set(),
                           listed={"a": obj("a", "new"), "b": obj("b")})
    assert [o.key for o in rebuild.files] == ["a", "b"]
    # reloading a: its old version is not read; the partitions it wrote are rebuilt too (here 2)
    rows = [row("a", "1", "2"), row("b", "2")]
    rebuild = plan_rebuild(["1"], rows, bucket=B, keys={"a"}, in_flight=set(), listed={"b": obj("b")})
    assert rebuild.partitions == ["1", "2"] and rebuild.extra == ["2"] and [o.key for o in rebuild.files] == ["b"]


def test_a_pending_row_counts_once_committed_and_another_loads_in_flight_one_goes_first() -> None:
    rows = [row("p", "1", state="pending", load="L2", block=5)]
    assert plan_rebuild(["1"], rows, bucket=B, keys=set(), in_flight={"L2"}, listed={}).files == []
    assert [o.key for o in plan_rebuild(["1"], rows, bucket=B, keys=set(), in_flight=set(),
                                        listed={"p": obj("p")}).files] == ["p"]
    assert conflicts(rows, ["1"], in_flight={"L2"}, before=9) == rows
    assert conflicts(rows, ["1"], in_flight={"L2"}, before=3) == []  # this load recorded first: it goes on
    assert conflicts(rows, ["2"], in_flight={"L2"}, before=9) == []


@pytest.mark.parametrize(("listed", "bucket", "why"), [
    ({}, B, "gone from S3"),
    ({"a": obj("a", "other")}, B, "changed since it was loaded: ETag other, loaded e"),
    ({"a": obj("a")}, "elsewhere", "in bucket elsewhere"),
])
def test_a_file_that_cannot_be_read_again_refuses_naming_it_and_the_way_forward(
    listed: dict[str, S3Object], bucket: str, why: str,
) -> None:
    with pytest.raises(RebuildRefused) as exc:
        plan_rebuild(["1"], [row("a", "1", bucket=bucket), row("b", "9")], bucket=B, keys=set(), in_flight=set(),
                     listed=listed)
    text = str(exc.value)
    assert "partition(s) 1 " in text and f"a ({why})" in text and "mode='append'" in text and "b (" not in text


def test_the_finalize_replaces_from_the_rebuild_table_and_drops_both_tables() -> None:
    target, staging = TableRef(database="d", name="t"), TableRef(database="d", name="_s3ch_stage_x")
    steps = LoadSteps(mode="replace_partitions", target=target, staging=staging, finalize="replace", reason="")
    rebuilt = TableRef(database="d", name="_s3ch_stage_xr")
    plan = finalize_statements(steps, staging_comment="", target_comment=None, staging_partitions=[("1", "1")],
                               rebuild=RebuildSource(table=rebuilt, present=[("1", "1")], drop=["2"]))
    sql = [s.sql for s in plan.steps]
    assert sql == ["ALTER TABLE `d`.`t` REPLACE PARTITION ID '1' FROM `d`.`_s3ch_stage_xr`, DROP PARTITION ID '2'",
                   "DROP TABLE IF EXISTS `d`.`_s3ch_stage_xr` SYNC", "DROP TABLE IF EXISTS `d`.`_s3ch_stage_x` SYNC"]
    assert plan.partitions == ["1"]


def test_a_reload_touches_every_partition_its_old_version_recorded_and_names_what_each_was_rebuilt_from() -> None:
    """a and b loaded together (both recorded in 1 and 2), c late into 2 (recorded in 2 alone); a reloaded
    with rows in 1 only: 2 is replaced too, and c, recorded only there, is read again with b."""
    rows = [row("a", "1", "2", version=1), row("b", "1", "2", version=1), row("c", "2", version=2)]
    staged = ["1"]
    assert touched(rows, staged, bucket=B, keys={"a"}, in_flight=set()) == ["1", "2"]
    listed = {k: obj(k) for k in ("b", "c")}
    rebuild = plan_rebuild(staged, rows, bucket=B, keys={"a"}, in_flight=set(), listed=listed)
    assert [o.key for o in rebuild.files] == ["b", "c"]
    report = rebuilt_partitions(rebuild, rows, ["1", "2"], in_flight=set(), new_keys=["a"])
    assert [(p.partition_id, p.earlier_files, p.new_files, p.dropped) for p in report] == [
        ("1", ["b"], ["a"], False), ("2", ["b", "c"], ["a"], False)]
    assert rebuilt_partitions(rebuild, rows, ["1"], in_flight=set(), new_keys=["a"])[1].dropped


@given(st.dictionaries(st.sampled_from([f"k{i}" for i in range(6)]),
                       st.lists(st.sampled_from("abcd"), min_size=1, max_size=3), min_size=1, max_size=6),
       st.data())
def test_every_partition_touched_is_the_new_ones_and_the_reloaded_files_old_ones(
    recorded: dict[str, list[str]], data: st.DataObject,
) -> None:
    reloaded = data.draw(st.sets(st.sampled_from(sorted(recorded))))
    staged = data.draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=2, unique=True))
    rows = [row(k, *ps) for k, ps in recorded.items()]
    expected = set(staged) | {p for k in reloaded for p in recorded[k]}
    assert touched(rows, staged, bucket=B, keys=reloaded, in_flight=set()) == sorted(expected)
