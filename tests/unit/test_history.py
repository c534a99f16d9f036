"""Learning from past loads (core/history.py): the tag, what is learned, and what the plan changes with it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.history import (
    SCALE_BOUNDS,
    Learned,
    PastLoad,
    TagFacts,
    history_key,
    learn,
    parse_tag,
    tag,
    tag_prefix,
)
from airflow_provider_s3ch.core.plan import make_plan
from tests.unit.test_peak_memory import CSV_FEW, FEW_LARGE
from tests.unit.test_planner import SOURCE_URL, profile, request

MiB = 1024 * 1024
GiB = 1024 * MiB


def past(written: int, files: int, peak: int, model: int, *, cap: int = 8 * GiB, step: str = "plan") -> PastLoad:
    return PastLoad(facts=TagFacts(file_bytes=files, model_bytes=model, cap=cap, step=step), written_bytes=written,
                    written_rows=1, memory_usage=peak, duration_ms=1000)


@settings(deadline=None)  # no per-example time limit: a busy machine can pause any example
@given(file_bytes=st.integers(0, 10**13), model=st.integers(0, 10**12), cap=st.integers(0, 10**12),
       step=st.sampled_from(["plan", "halve", "one_thread", "smallest"]), key=st.text(min_size=1, max_size=20))
def test_a_tag_reads_back_as_written_and_starts_with_its_keys_prefix(file_bytes, model, cap, step, key) -> None:
    k = history_key(key, "bucket", "data/*.csv.gz", "CSV")
    facts = TagFacts(file_bytes=file_bytes, model_bytes=model, cap=cap, step=step)
    text = tag(k, facts)
    assert text.startswith(tag_prefix(k)) and parse_tag(text) == facts


def test_keys_differ_by_table_bucket_glob_and_format_and_other_comments_are_not_tags() -> None:
    base = ("db.t", "b", "p/*.csv", "CSV")
    keys = {history_key(*base), history_key("db.u", *base[1:]), history_key("db.t", "c", *base[2:]),
            history_key(*base[:2], "p/*.tsv", "CSV"), history_key(*base[:3], "TSV")}
    assert len(keys) == 5
    assert parse_tag("nightly load") is None and parse_tag("s3ch/1 abc {not json") is None


def test_expansion_is_the_median_of_written_per_file_byte_and_only_without_footers() -> None:
    loads = [past(300, 100, 1, 0), past(330, 100, 1, 0), past(900, 100, 1, 0)]
    assert learn(loads, footers=False).expansion == 3.3
    assert learn(loads, footers=True).expansion is None


@settings(deadline=None)
@given(ratios=st.lists(st.floats(0.01, 100), min_size=1, max_size=10))
def test_memory_scale_is_bounded_and_ignores_loads_at_their_cap(ratios) -> None:
    loads = [past(1, 1, int(1000 * r), 1000) for r in ratios]
    scale = learn(loads, footers=True).memory_scale
    assert scale is not None and SCALE_BOUNDS[0] <= scale <= SCALE_BOUNDS[1]
    at_cap = [past(1, 1, 900, 2000, cap=1000)]
    assert learn(at_cap, footers=True).memory_scale is None


def test_the_start_step_is_the_newest_loads_and_only_at_the_same_cap() -> None:
    loads = [past(1, 1, 1, 0, cap=GiB, step="halve"), past(1, 1, 1, 0, cap=GiB, step="one_thread")]
    learned = learn(loads, footers=True)
    assert learned.start_step == "halve" and learned.start_cap == GiB
    assert learned.for_cap(GiB).start_step == "halve"
    other = learned.for_cap(2 * GiB)
    assert other.start_step is None and not any(c.startswith("starts from") for c in other.changes)
    assert learn([past(1, 1, 1, 0, step="plan"), *loads], footers=True).start_step is None


def test_the_plan_says_what_it_learned_and_changes_with_it() -> None:
    prof = profile(cores=2, memory=16 * GiB)
    first = make_plan(request(s3_uri="s3://bucket/data/*.csv.gz"), CSV_FEW, prof, source_url=SOURCE_URL)
    assert first.history is None
    learned = learn([past(int(CSV_FEW.total_bytes * 3.1), CSV_FEW.total_bytes, 800 * MiB, 700 * MiB)], footers=False)
    second = make_plan(request(s3_uri="s3://bucket/data/*.csv.gz"), CSV_FEW, prof, source_url=SOURCE_URL,
                       learned=learned)
    assert second.history is not None and second.history["loads"] == 1 and len(second.history["changes"]) == 2
    assert "x 3.10 (learned from earlier loads)" in second.settings.reasons["min_insert_block_size_bytes"]
    assert "x 1.14 (measured / predicted" in (second.predicted_peak_reason or "")
    assert second.predicted_peak_bytes != first.predicted_peak_bytes


def test_a_learned_step_applies_only_to_a_plan_at_the_same_cap() -> None:
    prof = profile(cores=2, memory=16 * GiB)
    learned = learn([past(1, 1, 500 * MiB, 0, cap=GiB, step="halve")], footers=True)
    same = make_plan(request(memory_cap="1GiB"), FEW_LARGE, prof, source_url=SOURCE_URL, learned=learned)
    other = make_plan(request(memory_cap="2GiB"), FEW_LARGE, prof, source_url=SOURCE_URL, learned=learned)
    assert same.history is not None and same.history["start_step"] == "halve"
    assert other.history is not None and other.history["start_step"] is None
    assert make_plan(request(), FEW_LARGE, prof, source_url=SOURCE_URL, learned=Learned()).history is None
