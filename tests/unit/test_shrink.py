"""The smaller plans a load steps down to after its own memory limit (core/plan/shrink.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import classify_server_error, is_query_memory_limit
from airflow_provider_s3ch.core.models import InsertSettings
from airflow_provider_s3ch.core.plan.settings import MIN_BLOCK_BYTES
from airflow_provider_s3ch.core.plan.shrink import STEPS, changed, smaller

MiB = 1024 * 1024
BOUNDED = ("max_insert_threads", "max_threads", "min_insert_block_size_bytes",
           "max_insert_delayed_streams_for_parallel_write", "max_download_buffer_size", "max_parsing_threads")


def first(threads: int, block: int, buffer: int | None = 50 * MiB) -> InsertSettings:
    values = {"max_insert_threads": threads, "max_memory_usage": 384 * MiB, "min_insert_block_size_bytes": block,
              "min_insert_block_size_rows": 0, "insert_deduplicate": 0}
    if buffer is not None:
        values["max_download_buffer_size"] = buffer
    return InsertSettings(values=values, reasons=dict.fromkeys(values, "planned"))


@settings(max_examples=200, deadline=None)
@given(threads=st.integers(min_value=1, max_value=64),
       block=st.integers(min_value=MIN_BLOCK_BYTES, max_value=4096 * MiB),
       cores=st.integers(min_value=1, max_value=128), buffer=st.one_of(st.none(), st.integers(1, 200 * MiB)))
def test_every_step_holds_no_more_than_the_one_before_and_keeps_the_cap(threads, block, cores, buffer) -> None:
    plan = first(threads, block, buffer)
    before = plan
    for name in STEPS:
        step = smaller(plan, name, cores=cores, user={})
        assert step.values["max_memory_usage"] == 384 * MiB  # the cap never moves
        assert step.values["min_insert_block_size_bytes"] >= MIN_BLOCK_BYTES
        for setting in BOUNDED:
            if setting in before.values:
                assert step.values[setting] <= before.values[setting], (name, setting)
        for setting, value in changed(plan, step).items():
            assert setting in step.reasons and "memory limit" in step.reasons[setting], setting
            assert value is not None
        before = step
    assert before.values["max_insert_threads"] == 1 and before.values.get("max_threads", cores) == 1
    assert before.values["min_insert_block_size_bytes"] == MIN_BLOCK_BYTES


def test_the_users_settings_are_kept_at_every_step() -> None:
    plan = first(4, 256 * MiB)
    user = {"max_insert_threads": 4, "min_insert_block_size_bytes": 256 * MiB}
    plan.values.update(user)
    for name in STEPS:
        step = smaller(plan, name, cores=8, user=user)
        assert step.values["max_insert_threads"] == 4 and step.values["min_insert_block_size_bytes"] == 256 * MiB
        assert step.values["max_threads"] <= 4


def test_the_steps_go_down_as_documented() -> None:
    plan = first(8, 64 * MiB)
    halve, one, least = (smaller(plan, n, cores=16, user={}) for n in STEPS)
    assert (halve.values["max_insert_threads"], halve.values["max_threads"]) == (4, 4)
    assert halve.values["min_insert_block_size_bytes"] == 16 * MiB
    assert one.values["max_insert_threads"] == 1 and one.values["min_insert_block_size_bytes"] == 4 * MiB
    assert one.values["input_format_parquet_max_block_size"] == 8192
    assert least.values["min_insert_block_size_bytes"] == MIN_BLOCK_BYTES
    assert least.values["input_format_parquet_max_block_size"] == 1024


def test_the_query_memory_limit_is_told_from_the_servers_in_both_wordings() -> None:
    new = (
        "Query memory limit exceeded: would use 411.74 MiB (attempt to allocate chunk of 34.78 MiB), "
        "maximum: 384.00 MiB"
    )
    old = "Memory limit (for query) exceeded: would use 9.31 GiB, maximum: 9.31 GiB"
    server = "Memory limit (total) exceeded: would use 20.1 GiB, maximum: 20 GiB"
    assert is_query_memory_limit(241, new) and is_query_memory_limit(241, old)
    assert not is_query_memory_limit(241, server) and not is_query_memory_limit(62, new)
    assert classify_server_error(241, new).kind == "terminal" and classify_server_error(241, server).kind == "transient"


def test_an_insert_block_over_the_partition_limit_is_terminal_and_says_which_setting() -> None:
    message = ("Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 100). The limit is "
               "controlled by 'max_partitions_per_insert_block' setting.")
    refused = classify_server_error(252, message)
    assert refused.kind == "terminal" and "max_partitions_per_insert_block" in refused.hint
    throttled = classify_server_error(252, "Code: 252. DB::Exception: Too many parts (3001). Merges are processing")
    assert throttled.kind == "transient" and "merges" in throttled.hint
