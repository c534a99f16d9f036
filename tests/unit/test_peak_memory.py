"""The predicted peak memory (core/plan/memory.py): against the benchmark's measured peaks, and its properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.models import Manifest, S3Object
from airflow_provider_s3ch.core.plan import PEAK_BAND, make_plan, predict_peak
from airflow_provider_s3ch.core.plan.budget import Budget
from airflow_provider_s3ch.core.plan.memory import (
    PEAK_DATA_FACTOR,
    PEAK_FIT_MARGIN,
    PEAK_S3_STREAM_BYTES,
    PEAK_S3_STREAM_FILES,
    fit_block,
)
from airflow_provider_s3ch.core.plan.settings import MIN_BLOCK_BYTES, plan_settings
from tests.unit.test_planner import SOURCE_URL, profile, request

MiB = 1024 * 1024


def files(count: int, total: int, fmt: str, compression: str | None = None, *, uncompressed: int | None = None,
          row_group: int | None = None) -> Manifest:
    size = total // count
    return Manifest(bucket="b", pattern="p/*", prefix="p/", format=fmt, compression=compression,
                    objects=[S3Object(key=f"p/{i:04d}", size=size) for i in range(count)],
                    uncompressed_bytes=uncompressed, max_row_group_bytes=row_group,
                    footer_files=count if row_group else 0)


# The benchmark's datasets (make bench, bench/results/results.json) and loads measured on them: the settings the
# insert ran with and its peak memory (system.query_log memory_usage) on a 2-core server.
FEW_LARGE = files(3, 231_872_224, "Parquet", uncompressed=642_553_125, row_group=214_282_052)
MANY_SMALL = files(400, 108_523_391, "Parquet", uncompressed=288_670_401, row_group=744_754)
CSV_FEW = files(4, 93_771_410, "CSVWithNames", "gzip")
CSV_MANY = files(200, 93_887_402, "CSVWithNames", "gzip")


def s(threads: int | None = None, block_mib: float | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {**extra}
    if threads is not None:
        out["max_insert_threads"] = threads
    if block_mib is not None:
        out["min_insert_block_size_bytes"] = int(block_mib * MiB)
    return out


MEASURED = [
    (FEW_LARGE, s(), 1898), (FEW_LARGE, s(2, 76.6), 1340), (FEW_LARGE, s(1, 64), 1172), (FEW_LARGE, s(2, 256), 1850),
    (FEW_LARGE, s(1, 1024), 1952), (FEW_LARGE, s(4, 64), 1457),
    (FEW_LARGE, s(1, 38.3, max_threads=1, max_memory_usage=1024 * MiB), 487),
    (FEW_LARGE, s(1, 5.3, max_threads=1, max_memory_usage=256 * MiB), 227),
    (MANY_SMALL, s(), 889), (MANY_SMALL, s(2, 64), 508), (MANY_SMALL, s(1, 64), 334), (MANY_SMALL, s(1, 256), 774),
    (MANY_SMALL, s(2, 1024), 844), (MANY_SMALL, s(1, 10.7, max_threads=1, max_memory_usage=256 * MiB), 172),
    (CSV_FEW, s(), 825), (CSV_FEW, s(2, 64), 864), (CSV_FEW, s(1, 64), 538), (CSV_FEW, s(2, 1024), 844),
    (CSV_MANY, s(), 881), (CSV_MANY, s(2, 64), 497), (CSV_MANY, s(1, 64), 339), (CSV_MANY, s(2, 256), 881),
]


@pytest.mark.parametrize(("man", "values", "peak_mib"), MEASURED)
def test_the_prediction_is_within_its_band_on_the_benchmarks_loads(man: Manifest, values: dict, peak_mib: int) -> None:
    estimate = predict_peak(values, man, cores=2, fmt=man.format, compression=man.compression)
    ratio = peak_mib * MiB / estimate.bytes
    assert PEAK_BAND[0] <= ratio <= PEAK_BAND[1], (ratio, estimate.reason)


# The same files read from local disk with file() (make bench's control loads and bench probes with 1, 2 and 4
# threads): a stream over many files holds less than from S3; with few files per stream, or blocks bounded by
# the data, about the same.
MEASURED_FILE = [
    (FEW_LARGE, s(2, 76.6), 1271), (FEW_LARGE, s(2, 76.6), 1337), (CSV_FEW, s(2, 64), 852), (CSV_FEW, s(2, 64), 865),
    (MANY_SMALL, s(2, 64), 388), (MANY_SMALL, s(2, 64), 395), (MANY_SMALL, s(1, 64), 244), (MANY_SMALL, s(4, 64), 572),
    (MANY_SMALL, s(1, 256), 796), (MANY_SMALL, s(2, 1024), 840),
    (CSV_MANY, s(2, 64), 311), (CSV_MANY, s(2, 64), 361), (CSV_MANY, s(1, 64), 244), (CSV_MANY, s(4, 64), 532),
    (CSV_MANY, s(1, 256), 797), (CSV_MANY, s(2, 1024), 840),
]


@pytest.mark.parametrize(("man", "values", "peak_mib"), MEASURED_FILE)
def test_the_prediction_for_local_files_is_within_two_thirds_and_three_halves(man: Manifest, values: dict,
                                                                              peak_mib: int) -> None:
    values = {"max_threads": values.get("max_insert_threads", 2), **values}
    estimate = predict_peak(values, man, cores=2, fmt=man.format, compression=man.compression, source="file")
    ratio = peak_mib * MiB / estimate.bytes
    assert 1 / 1.5 <= ratio <= 1.5, (ratio, estimate.reason)
    from_s3 = predict_peak(values, man, cores=2, fmt=man.format, compression=man.compression)
    if man.file_count >= 200 and estimate.bytes < from_s3.bytes:  # the S3 model alone misses these by far more
        assert "read from local files" in estimate.reason and peak_mib * MiB / from_s3.bytes < ratio


# The end-to-end section on a 16-core server (bench/results/cores16, two runs; 125 GiB): 400,000 rows as 20 Parquet
# files or 10 gzip'd CSV files, each load a fresh operator task (its plan: 8 insert threads, 64 MiB blocks) and a
# hand-written insert with ClickHouse's defaults, from S3 straight and through a proxy adding 20 or 50 ms per request.
# Peaks in MiB: the six operator loads and the six hand-written ones of each dataset and S3 path.
E2E_PARQUET = files(20, 105_901_446, "Parquet", uncompressed=287_739_211, row_group=14_441_817)
E2E_CSV = files(10, 93_775_006, "CSVWithNames", "gzip")
PLAN_16 = s(8, 64, min_insert_block_size_rows=0, max_download_buffer_size=52_428_800, insert_deduplicate=0,
            optimize_on_insert=0)
MEASURED_16 = [
    (E2E_PARQUET, "direct", [1286, 1265, 1299, 1288, 1332, 1213], [782, 778, 778, 782, 780, 779]),
    (E2E_PARQUET, "20 ms", [914, 798, 902, 750, 1026, 1054], [779, 780, 810, 784, 781, 783]),
    (E2E_PARQUET, "50 ms", [936, 850, 829, 872, 907, 801], [781, 781, 779, 806, 783, 780]),
    (E2E_CSV, "direct", [1201, 1083, 1091, 943, 853, 1042], [743, 754, 766, 767, 768, 775]),
    (E2E_CSV, "20 ms", [960, 845, 654, 726, 749, 1006], [769, 787, 766, 775, 758, 772]),
    (E2E_CSV, "50 ms", [831, 672, 629, 985, 875, 820], [774, 774, 825, 789, 760, 775]),
]


def within_rule(peak: int, predicted: int) -> bool:
    """Within 0.67-1.5 of the prediction, or within 64 MiB of it for a peak under 100 MiB."""
    if peak < 100 * MiB:
        return abs(peak - predicted) <= 64 * MiB
    return 0.67 <= peak / predicted <= 1.5


@pytest.mark.parametrize(("man", "path", "operator", "hand"), MEASURED_16,
                         ids=[f"{m.format}-{path}" for m, path, _, _ in MEASURED_16])
def test_the_prediction_holds_on_16_cores(man: Manifest, path: str, operator: list[int], hand: list[int]) -> None:
    plan = make_plan(request(), man, profile(cores=16, memory=125 * 1024 * MiB), source_url=SOURCE_URL)
    # The loads were measured with PLAN_16; Parquet now keeps ClickHouse's download buffer (the size ladder), which
    # the peak model does not count.
    planned = dict(PLAN_16, max_download_buffer_size=None) if man.format == "Parquet" else PLAN_16
    assert {k: plan.settings.values.get(k) for k in PLAN_16} == planned and "max_threads" not in plan.settings.values
    fmt, compression = man.format, man.compression
    assert plan.predicted_peak_bytes == predict_peak(PLAN_16, man, cores=16, fmt=fmt, compression=compression).bytes
    assert not any("will likely stop" in w for w in plan.warnings)
    for values, peaks in ((PLAN_16, operator), ({}, hand)):
        estimate = predict_peak(values, man, cores=16, fmt=fmt, compression=compression)
        for peak_mib in peaks:
            ratio = peak_mib * MiB / estimate.bytes
            assert within_rule(peak_mib * MiB, estimate.bytes) and PEAK_BAND[0] <= ratio <= PEAK_BAND[1], (
                ratio, estimate.reason)


def test_text_streams_count_within_the_bound_by_the_data_and_parquet_row_groups_beside_it() -> None:
    # 8 insert threads over 10 gzip'd CSV files: the writing and the 10 streams' text together at most the bound;
    # over 20 Parquet files the 16 streams' row groups come on top of the bounded writing.
    csv = predict_peak(PLAN_16, E2E_CSV, cores=16, fmt="CSVWithNames", compression="gzip")
    assert csv.terms["blocks"] + csv.terms["reading"] == int(PEAK_DATA_FACTOR * (4 * E2E_CSV.total_bytes))
    assert "the writing and the reading bounded by" in csv.reason
    parquet = predict_peak(PLAN_16, E2E_PARQUET, cores=16, fmt="Parquet", compression=None)
    assert parquet.terms["blocks"] == int(PEAK_DATA_FACTOR * 287_739_211)
    assert parquet.terms["reading"] == int(16 * 1.5 * 14_441_817) and "the writing bounded by" in parquet.reason
    # below the bound the text streams still add up: 2 threads x 64 MiB over the same files on 2 cores
    two = predict_peak(s(2, 64), E2E_CSV, cores=2, fmt="CSVWithNames", compression="gzip")
    assert two.terms["blocks"] == 2 * (3 * 64 + 60) * MiB and "bounded" not in two.reason


sizes = st.integers(min_value=1 * MiB, max_value=4096 * MiB)


@settings(max_examples=200, deadline=None)
@given(threads=st.integers(1, 16), more=st.integers(1, 16), block=sizes, bigger=sizes, cores=st.integers(1, 64),
       n=st.integers(1, 2000), total=st.integers(1, 10**11), row_group=st.none() | sizes)
def test_more_threads_or_bigger_blocks_never_predict_less(threads, more, block, bigger, cores, n, total, row_group):
    man = files(n, max(n, total), "Parquet", uncompressed=3 * max(n, total) if row_group else None, row_group=row_group)

    def peak(t: int, b: int) -> int:
        values = {"max_insert_threads": t, "min_insert_block_size_bytes": b, "max_threads": t}
        return predict_peak(values, man, cores=cores, fmt="Parquet", compression=None).bytes

    assert peak(threads + more, block) >= peak(threads, block)
    assert peak(threads, block + bigger) >= peak(threads, block)


@settings(max_examples=200, deadline=None)
@given(threads=st.integers(1, 16), block=sizes, cores=st.integers(1, 64), n=st.integers(1, 2000),
       total=st.integers(1, 10**11), row_group=st.none() | sizes)
def test_local_files_predict_no_more_than_s3_and_at_most_one_stream_term_less(threads, block, cores, n, total,
                                                                             row_group) -> None:
    man = files(n, max(n, total), "Parquet", uncompressed=3 * max(n, total) if row_group else None, row_group=row_group)
    values = {"max_insert_threads": threads, "min_insert_block_size_bytes": block, "max_threads": threads}
    s3 = predict_peak(values, man, cores=cores, fmt="Parquet", compression=None)
    local = predict_peak(values, man, cores=cores, fmt="Parquet", compression=None, source="file")
    readers = min(threads, n)
    assert s3.bytes - readers * PEAK_S3_STREAM_BYTES * min(1.0, n / readers / PEAK_S3_STREAM_FILES) - 1 <= (
        local.bytes) <= s3.bytes
    assert local.terms["reading"] == s3.terms["reading"] and local.terms["base"] == s3.terms["base"]


@settings(max_examples=100, deadline=None)
@given(cap=st.integers(64 * MiB, 8192 * MiB), block=sizes, threads=st.integers(1, 32))
def test_the_prediction_never_passes_the_cap_and_says_when_it_reaches_it(cap, block, threads) -> None:
    values = {"max_insert_threads": threads, "min_insert_block_size_bytes": block, "max_memory_usage": cap}
    estimate = predict_peak(values, FEW_LARGE, cores=32, fmt="Parquet", compression=None)
    assert estimate.bytes <= cap
    # "will likely stop" only where even the model's low end reaches the cap; "may" within its band of it.
    assert estimate.at_cap == (estimate.model_bytes * PEAK_BAND[0] >= cap)
    assert ("reaches max_memory_usage" in estimate.reason) == estimate.at_cap
    assert ("may stay under it or stop there" in estimate.reason) == (cap <= estimate.model_bytes < cap / PEAK_BAND[0])


def test_scale_and_expansion_move_the_prediction() -> None:
    plain = predict_peak({}, CSV_FEW, cores=2, fmt="CSVWithNames", compression="gzip")
    assert predict_peak({}, CSV_FEW, cores=2, fmt="CSVWithNames", compression="gzip", scale=1.5).bytes == int(
        plain.model_bytes * 1.5)
    learned = predict_peak({}, CSV_FEW, cores=2, fmt="CSVWithNames", compression="gzip", expansion=2.0)
    assert learned.bytes < plain.bytes and "x 1.50" not in learned.reason


def test_the_plan_carries_its_prediction_and_fits_its_block_under_the_cap() -> None:
    # The guide's first plan for 3 files of one 204 MiB row group each under a 1 GiB cap measured ~1.2 GiB
    # (a memory limit at 1 GiB); the prediction for that block says so, and the plan fits its block instead.
    prof = profile(cores=2, memory=16 * 1024 * MiB)
    guide = make_plan(request(memory_cap="1GiB", settings={"min_insert_block_size_bytes": 1024 * MiB // 6}),
                      FEW_LARGE, prof, source_url=SOURCE_URL)
    assert guide.predicted_peak_bytes == 1024 * MiB and "max_memory_usage 1 GiB" in (guide.predicted_peak_reason or "")
    p = make_plan(request(memory_cap="1GiB"), FEW_LARGE, prof, source_url=SOURCE_URL)
    assert p.predicted_peak_bytes is not None and p.predicted_peak_bytes * PEAK_FIT_MARGIN <= 1024 * MiB
    assert "max_memory_usage" not in (p.predicted_peak_reason or "")
    assert "fitted to the budget" in p.settings.reasons["min_insert_block_size_bytes"]
    free = make_plan(request(), MANY_SMALL, prof, source_url=SOURCE_URL)
    assert free.predicted_peak_bytes is not None and 300 * MiB < free.predicted_peak_bytes < 700 * MiB


@settings(max_examples=200, deadline=None)
@given(cap=st.integers(64 * MiB, 64 * 1024 * MiB), cores=st.integers(1, 64), n=st.integers(1, 2000),
       total=st.integers(10**6, 10**12), row_group=st.none() | sizes, scale=st.sampled_from([1.0, 0.6, 1.8]))
def test_a_fitted_block_is_the_largest_that_fits_and_an_unfitted_one_fits_already(cap, cores, n, total, row_group,
                                                                                  scale) -> None:
    man = files(n, total, "Parquet", uncompressed=3 * total if row_group else None, row_group=row_group)
    try:
        formula = plan_settings(request(memory_cap=str(cap)), man, profile(cores=cores, memory=256 * 1024 * MiB),
                                Budget(per_node=cap, reason="cap"), 1)
    except PlanError:  # the guide's block below the least the planner takes: refused before any fitting
        assume(False)
    fitted = fit_block(formula, man, cores=cores, fmt="Parquet", compression=None, scale=scale)
    block = fitted.values["min_insert_block_size_bytes"]

    def margin(b: int) -> float:
        values = {**formula.values, "min_insert_block_size_bytes": b}
        return predict_peak(values, man, cores=cores, fmt="Parquet", compression=None, scale=scale).model_bytes * (
            scale * PEAK_FIT_MARGIN)

    planned = formula.values["min_insert_block_size_bytes"]
    if fitted == formula:  # the planned block fits, or not even the smallest block does
        assert margin(planned) <= cap or margin(MIN_BLOCK_BYTES) > cap
    else:
        assert MIN_BLOCK_BYTES <= block < planned and block % MiB == 0
        assert margin(block) <= cap < margin(block + MiB)
        assert "fitted to the budget" in fitted.reasons["min_insert_block_size_bytes"]
        assert {k: v for k, v in fitted.values.items() if k != "min_insert_block_size_bytes"} == {
            k: v for k, v in formula.values.items() if k != "min_insert_block_size_bytes"}


def latent(request_ms: float | None, n: int = 20, *, fmt: str = "Parquet", row_group: int = 14 * MiB) -> Manifest:
    man = files(n, n * 5 * MiB, fmt, uncompressed=n * 14 * MiB if fmt == "Parquet" else None,
                row_group=row_group if fmt == "Parquet" else None)
    return man.model_copy(update={"request_ms": request_ms})


def test_parquet_over_a_slow_s3_reads_with_more_streams_within_the_files_and_the_budget() -> None:
    prof = profile(cores=2, memory=16 * 1024 * MiB)

    def threads(man: Manifest, **kwargs: Any) -> Any:
        return make_plan(request(**kwargs), man, prof, source_url=SOURCE_URL).settings.values.get("max_threads")

    assert threads(latent(30.0)) == 8
    assert threads(latent(3.0)) is None and threads(latent(None)) is None
    assert threads(latent(30.0, n=5)) == 5  # no more streams than files
    assert threads(latent(30.0, n=2)) is None  # no more files than cores
    assert threads(latent(30.0, fmt="CSVWithNames")) is None
    assert threads(latent(30.0, row_group=200 * MiB), memory_cap="2GiB") is None  # 8 x 6 x 200 MiB > 1 GiB
    assert threads(latent(30.0), settings={"max_threads": 3}) == 3  # the user's setting wins
    p = make_plan(request(), latent(30.0), prof, source_url=SOURCE_URL)
    assert "8 reading x" in (p.predicted_peak_reason or "")
