"""Unit tests for :mod:`airflow_provider_s3ch.core.plan` (pure: no server)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_s3ch.core import plan as planner
from airflow_provider_s3ch.core.errors import PlanError, RegionMismatchError
from airflow_provider_s3ch.core.models import LoadPlan, LoadRequest, Manifest, S3Object
from airflow_provider_s3ch.core.plan import MIN_DATA_BLOCK_BYTES, GiB, MiB, make_plan
from airflow_provider_s3ch.core.server_models import ClusterNode, ServerProfile, TableInfo

#: The guide's Stack Overflow posts: 24.03 GB of Parquet in 189 files.
GUIDE_BYTES = 24_030_000_000
GUIDE_FILES = 189
SOURCE_URL = "https://bucket.s3.amazonaws.com/data/*.parquet"


def request(**kwargs: Any) -> LoadRequest:
    """A LoadRequest with defaults for the fields a test does not care about.

    :param kwargs: fields to set.
    """
    fields: dict[str, Any] = {"s3_uri": "s3://bucket/data/*.parquet", "table": "db.events"}
    fields.update(kwargs)
    return LoadRequest(**fields)


def manifest(
    files: int = 12,
    total: int = 12 * 10 * MiB,
    fmt: str = "Parquet",
    compression: str | None = None,
    region: str | None = None,
    sizes: list[int] | None = None,
) -> Manifest:
    """A Manifest of ``files`` equal objects adding up to ``total`` bytes (or explicit ``sizes``).

    :param files: how many objects.
    :param total: their total size.
    :param fmt: the format.
    :param compression: the compression.
    :param region: the bucket's region.
    :param sizes: explicit object sizes (overrides files and total).
    """
    if sizes is None:
        sizes = [total // files] * files
        sizes[-1] += total - sum(sizes)
    objects = [S3Object(key=f"data/part-{i:04d}", size=s) for i, s in enumerate(sizes)]
    return Manifest(
        bucket="bucket",
        pattern="data/*.parquet",
        prefix="data/",
        objects=objects,
        format=fmt,
        compression=compression,
        region=region,
    )


def table(engine: str = "MergeTree", **kwargs: Any) -> TableInfo:
    """A TableInfo for ``db.events``.

    :param engine: the table engine.
    :param kwargs: more fields (``local_engine``, ``dist_cluster``...).
    """
    return TableInfo(database="db", name="events", engine=engine, **kwargs)


def distributed_table(local_engine: str = "MergeTree", cluster: str = "c3") -> TableInfo:
    """A Distributed table over ``db.events_local`` on ``cluster``.

    :param local_engine: the local table's engine.
    :param cluster: the Distributed table's cluster.
    """
    return table(
        "Distributed",
        dist_cluster=cluster,
        local_database="db",
        local_table="events_local",
        local_engine=local_engine,
    )


def profile(
    cores: int = 8,
    memory: int = 32 * GiB,
    *,
    nodes: int = 0,
    cluster: str | None = None,
    tbl: TableInfo | None = None,
    region: str | None = None,
    node_cores: list[int] | None = None,
) -> ServerProfile:
    """A ServerProfile; ``nodes`` > 0 makes a cluster ``c3`` of that many nodes.

    :param cores: the server's cores.
    :param memory: the server's memory (0: unknown).
    :param nodes: cluster nodes.
    :param cluster: the cluster name (defaults to ``c3`` when nodes > 0).
    :param tbl: the target table.
    :param region: the server's region.
    :param node_cores: cores of each node.
    """
    return ServerProfile(
        version="25.8",
        cores=cores,
        memory_bytes=memory,
        memory_source="test",
        region=region,
        cluster=cluster or ("c3" if nodes else None),
        nodes=[ClusterNode(host=f"ch{i}", port=9000, replica_num=i + 1) for i in range(nodes)],
        node_cores=node_cores or [],
        table=tbl or table(),
    )


def plan(req: LoadRequest | None = None, man: Manifest | None = None, prof: ServerProfile | None = None) -> LoadPlan:
    """make_plan with defaults.

    :param req: the request.
    :param man: the manifest.
    :param prof: the profile.
    """
    return make_plan(req or request(), man or manifest(), prof or profile(), source_url=SOURCE_URL)


def check(p: LoadPlan, name: str) -> Any:
    """The plan's check called ``name``."""
    return next(c for c in p.checks if c.name == name)


# --- threads -------------------------------------------------------------------------


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (3, 2), (4, 2), (5, 2), (8, 4), (64, 32)])
def test_threads_are_half_the_cores_but_at_least_two(cores: int, threads: int) -> None:
    p = plan(prof=profile(cores=cores))
    assert p.settings.values["max_insert_threads"] == threads


def test_threads_reason_names_the_cores() -> None:
    reason = plan(prof=profile(cores=8)).settings.reasons["max_insert_threads"]
    assert "half of 8 cores" in reason
    assert "background merges" in reason


def test_threads_reason_says_why_two_on_two_cores() -> None:
    reason = plan(prof=profile(cores=2)).settings.reasons["max_insert_threads"]
    assert "half of 2 cores would be 1" in reason and "at least 2" in reason


def footer_manifest(row_group: int, uncompressed: int, **kwargs: Any) -> Manifest:
    """A Parquet manifest whose footers were read."""
    return manifest(**kwargs).model_copy(
        update={"max_row_group_bytes": row_group, "uncompressed_bytes": uncompressed, "footer_files": 4}
    )


def test_row_groups_too_big_for_two_threads_lower_threads() -> None:
    # 4 cores -> 2 threads; 225 MiB row groups x 6 x 2 = 2.6 GiB > the 2 GiB cap -> 1 thread.
    p = plan(request(memory_cap="2GiB"), footer_manifest(225 * MiB, 700 * MiB), profile(cores=4))
    assert p.settings.values["max_insert_threads"] == 1
    assert "row group" in p.settings.reasons["max_insert_threads"]
    assert not any("row group" in w for w in p.warnings)


def test_row_groups_too_big_for_the_cap_warn() -> None:
    # The benchmark's case: 204 MiB row groups x 6 = 1.2 GiB > a 1 GiB cap (that load failed).
    p = plan(request(memory_cap="1GiB"), footer_manifest(204 * MiB, 700 * MiB), profile(cores=4))
    assert p.settings.values["max_insert_threads"] == 1
    assert any("row group" in w and "MEMORY_LIMIT_EXCEEDED" in w and "memory_cap" in w for w in p.warnings)


def test_small_row_groups_keep_threads() -> None:
    p = plan(request(memory_cap="1GiB"), footer_manifest(20 * MiB, 700 * MiB), profile(cores=4))
    assert p.settings.values["max_insert_threads"] == 2
    assert not any("row group" in w for w in p.warnings)


def test_footer_sizes_replace_the_expansion_factor() -> None:
    # 1 GiB of Parquet, 40 GiB uncompressed by the footers (not x3): 40 GiB / (4 threads x 4) = 2.5 GiB.
    p = plan(request(memory_cap="64GiB"), footer_manifest(64 * MiB, 40 * GiB, files=40, total=1 * GiB),
             profile(cores=8))
    assert p.settings.values["min_insert_block_size_bytes"] == 40 * GiB // 16
    reason = p.settings.reasons["min_insert_block_size_bytes"]
    assert "footers" in reason and "40 GiB uncompressed" in reason


# --- memory budget and block size --------------------------------------------------


def _fitted(p: LoadPlan, man: Manifest, cores: int) -> int:
    """The largest block whose predicted peak x the margin stays under the plan's budget (checked one MiB up)."""
    values = p.settings.values
    block = values["min_insert_block_size_bytes"]

    def peak(b: int) -> int:
        return planner.predict_peak({**values, "min_insert_block_size_bytes": b}, man, cores=cores, fmt=p.format,
                                    compression=p.compression).model_bytes

    assert peak(block) * planner.PEAK_FIT_MARGIN <= p.budget_bytes < peak(block + MiB) * planner.PEAK_FIT_MARGIN
    return block


def test_guide_example_block_size() -> None:
    # The guide: 32 GiB / (3 x 4 threads) = 2,863,311,530. Its block counts three copies per thread and nothing
    # else; the model adds the reading streams, the write buffers and the base, so the plan fits the block under
    # the cap with its margin: a little smaller than the guide's.
    man = manifest(files=GUIDE_FILES, total=GUIDE_BYTES)
    p = plan(request(memory_cap="32GiB"), man, profile(cores=8))
    values = p.settings.values
    assert values["max_insert_threads"] == 4
    assert 0.75 * 2863311530 < _fitted(p, man, 8) < 2863311530
    assert values["min_insert_block_size_rows"] == 0
    assert values["max_memory_usage"] == 34359738368
    assert p.budget_bytes == 34359738368
    assert "memory_cap" in p.budget_reason
    reason = p.settings.reasons["min_insert_block_size_bytes"]
    assert "fitted to the budget" in reason and "memory formula" in reason and "data cap" in reason
    assert "2.67 GiB the predicted peak would be" in reason


def test_small_load_caps_block_by_data() -> None:
    p = plan(request(memory_cap="32GiB"), manifest(files=10, total=100_000_000), profile(cores=8))
    # 100 MB x 3 = 300 MB over 4 threads x 4 blocks = 18 MB: the 64 MiB floor.
    assert p.settings.values["min_insert_block_size_bytes"] == MIN_DATA_BLOCK_BYTES == 64 * MiB
    reason = p.settings.reasons["min_insert_block_size_bytes"]
    assert "floor 64 MiB" in reason and "memory formula" in reason


def test_benchmark_sized_load_gets_data_sized_blocks() -> None:
    # The benchmark's parquet_few_large on 2 cores: 232 MB, ~650 MB uncompressed by the footers,
    # 2 threads x 4 blocks -> ~81 MB, far under the formula (10 GiB / 6).
    p = plan(
        request(),
        footer_manifest(225 * MiB, 650_000_000, files=3, total=232_000_000),
        profile(cores=2, memory=20 * GiB),
    )
    assert p.settings.values["max_insert_threads"] == 2
    assert p.settings.values["min_insert_block_size_bytes"] == 650_000_000 // 8
    assert "several blocks" in p.settings.reasons["min_insert_block_size_bytes"]


def test_large_load_uses_the_guide_formula_fitted_to_the_budget() -> None:
    # 200 GiB of Parquet on 8 cores with a 32 GiB cap: the data cap (600 GiB / 16) is far above the formula, so
    # the guide's budget / (3 x threads) is the block, fitted under the budget with what else the load holds.
    man = manifest(files=500, total=200 * GiB)
    p = plan(request(memory_cap="32GiB"), man, profile(cores=8))
    assert 0.75 * (32 * GiB // 12) < _fitted(p, man, 8) < 32 * GiB // 12
    assert "(the guide)" in p.settings.reasons["min_insert_block_size_bytes"]


def test_a_block_the_user_sets_is_not_fitted() -> None:
    p = plan(request(memory_cap="2GiB", settings={"min_insert_block_size_bytes": 600 * MiB}),
             manifest(files=500, total=200 * GiB), profile(cores=8))
    assert p.settings.values["min_insert_block_size_bytes"] == 600 * MiB
    assert p.settings.reasons["min_insert_block_size_bytes"].startswith("set by the user")


def test_medium_load_gets_several_blocks_per_thread() -> None:
    # 12 GiB of Parquet, x3 = 36 GiB uncompressed, 4 threads x 4 blocks -> 2.25 GiB blocks (the guide's rule beyond
    # 32 GiB a node); 4 GiB, x3 = 12 GiB, stops at ClickHouse's 256 MiB (partitions not known).
    p = plan(request(memory_cap="64GiB"), manifest(files=40, total=12 * GiB), profile(cores=8))
    assert p.settings.values["min_insert_block_size_bytes"] == 36 * GiB // 16
    assert "several blocks" in p.settings.reasons["min_insert_block_size_bytes"]
    p = plan(request(memory_cap="32GiB"), manifest(files=40, total=4 * GiB), profile(cores=8))
    assert p.settings.values["min_insert_block_size_bytes"] == 256 * MiB


def test_tiny_cap_is_allowed() -> None:
    p = plan(request(memory_cap="100MiB"), manifest(), profile(cores=2))
    assert p.settings.values["max_insert_threads"] == 2
    assert p.settings.values["min_insert_block_size_bytes"] == 100 * MiB // 6
    assert p.settings.values["max_memory_usage"] == 100 * MiB


def test_cap_below_minimum_is_refused() -> None:
    with pytest.raises(PlanError) as err:
        plan(request(memory_cap="32MiB"), manifest(), profile())
    message = str(err.value)
    assert "memory_cap=33554432" in message
    assert "64 MiB" in message
    assert "raise memory_cap" in message


def test_block_below_minimum_is_refused() -> None:
    # 64 MiB over 32 threads -> 0.67 MiB blocks.
    with pytest.raises(PlanError) as err:
        plan(request(memory_cap="64MiB"), manifest(), profile(cores=64))
    message = str(err.value)
    assert "1 MiB" in message and "memory_cap" in message and "max_insert_threads" in message


def test_default_budget_is_half_the_memory() -> None:
    p = plan(prof=profile(memory=16 * GiB))
    assert p.budget_bytes == 8 * GiB
    assert p.settings.values["max_memory_usage"] == 8 * GiB
    assert "0.5" in p.budget_reason


def test_unknown_memory_uses_fallback_and_warns() -> None:
    p = plan(prof=profile(memory=0))
    assert p.budget_bytes == planner.FALLBACK_BUDGET_BYTES
    assert any("memory is unknown" in w and "memory_cap" in w for w in p.warnings)


def test_tiny_server_without_cap_is_refused() -> None:
    with pytest.raises(PlanError, match="set memory_cap"):
        plan(prof=profile(memory=100 * MiB))


def test_low_memory_lowers_delayed_streams() -> None:
    low = plan(request(memory_cap="1GiB"))
    assert low.settings.values["max_insert_delayed_streams_for_parallel_write"] == 8
    high = plan(request(memory_cap="8GiB"))
    assert "max_insert_delayed_streams_for_parallel_write" not in high.settings.values


@pytest.mark.parametrize(
    ("fmt", "compression", "factor"),
    [("Parquet", None, 3.0), ("Parquet", "gzip", 3.0), ("CSV", "gzip", 4.0), ("CSV", None, 1.0),
     ("Native", None, 1.0), ("JSONEachRow", "none", 1.0), ("ORC", None, 3.0)],
)
def test_expansion_factor(fmt: str, compression: str | None, factor: float) -> None:
    assert planner.expansion_factor(fmt, compression) == factor


# --- download buffer -----------------------------------------------------------------


def test_many_small_files_get_the_large_download_buffer() -> None:
    p = plan(man=manifest(files=12, total=12 * 20 * MiB, fmt="CSV", compression="gzip"), prof=profile(cores=8))
    assert p.settings.values["max_download_buffer_size"] == 52428800
    assert "size ladder" in p.settings.reasons["max_download_buffer_size"]


@pytest.mark.parametrize("fmt", ["Parquet", "parquet"])
def test_parquet_keeps_the_default_buffer(fmt: str) -> None:
    # On the size ladder the 50 MiB buffer slowed Parquet loads of ~46 MiB files and sped up gzip'd CSV ones.
    p = plan(man=manifest(files=12, total=12 * 46 * MiB, fmt=fmt), prof=profile(cores=8))
    assert "max_download_buffer_size" not in p.settings.values
    assert "max_download_buffer_size" not in p.settings.reasons


def test_few_files_keep_the_default_buffer() -> None:
    p = plan(man=manifest(files=2, total=2 * 20 * MiB), prof=profile(cores=8))
    assert "max_download_buffer_size" not in p.settings.values
    assert "max_download_buffer_size" not in p.settings.reasons


def test_large_files_keep_the_default_buffer() -> None:
    p = plan(man=manifest(files=12, total=12 * 500 * MiB), prof=profile(cores=8))
    assert "max_download_buffer_size" not in p.settings.values


# --- fixed settings and overrides ----------------------------------------------------


def test_object_storage_settings() -> None:
    values = plan().settings.values
    assert values["insert_deduplicate"] == 0
    assert values["optimize_on_insert"] == 0


def test_values_and_reasons_have_the_same_keys() -> None:
    for p in (
        plan(),
        plan(request(memory_cap="1GiB", settings={"max_threads": 4})),
        plan(man=manifest(files=12), prof=profile(nodes=3, tbl=distributed_table())),
    ):
        assert set(p.settings.values) == set(p.settings.reasons)


def test_values_are_ints() -> None:
    values = plan().settings.values
    for name in ("max_insert_threads", "max_memory_usage", "min_insert_block_size_bytes"):
        assert type(values[name]) is int


def test_user_overrides_are_reported() -> None:
    p = plan(request(settings={"max_insert_threads": 16, "max_threads": 8, "input_format_parallel_parsing": "0"}))
    s = p.settings
    assert s.values["max_insert_threads"] == 16
    assert s.reasons["max_insert_threads"] == "set by the user (planner chose 4)"
    assert s.values["max_threads"] == 8
    assert s.reasons["max_threads"] == "set by the user"
    assert s.overrides == ["max_insert_threads", "max_threads", "input_format_parallel_parsing"]


def test_user_threads_size_the_block() -> None:
    man = manifest(total=GUIDE_BYTES)
    p = plan(request(memory_cap="32GiB", settings={"max_insert_threads": 8}), man)
    assert 0.75 * (32 * GiB // 24) < _fitted(p, man, 8) < 32 * GiB // 24


def test_user_block_size_skips_the_block_minimum() -> None:
    p = plan(request(memory_cap="64MiB", settings={"min_insert_block_size_bytes": 4 * MiB}), prof=profile(cores=64))
    assert p.settings.values["min_insert_block_size_bytes"] == 4 * MiB


def test_no_overrides_by_default() -> None:
    assert plan().settings.overrides == []


# --- region --------------------------------------------------------------------------


def test_region_equal_is_ok() -> None:
    p = plan(man=manifest(region="eu-west-3"), prof=profile(region="eu-west-3"))
    assert check(p, "region").status == "ok"
    assert p.warnings == []


def test_region_mismatch_warns() -> None:
    p = plan(man=manifest(region="us-east-1"), prof=profile(region="eu-west-3"))
    assert check(p, "region").status == "warn"
    expected = (
        "bucket 'bucket' is in us-east-1 but ClickHouse is in eu-west-3: cross-region reads are slower "
        "and cost egress; move the data or set region_check='off'"
    )
    assert expected in p.warnings


def test_region_mismatch_fails_under_policy_fail() -> None:
    with pytest.raises(RegionMismatchError, match="us-east-1 but ClickHouse is in eu-west-3"):
        plan(request(region_check="fail"), manifest(region="us-east-1"), profile(region="eu-west-3"))


def test_region_check_off_is_skipped() -> None:
    p = plan(request(region_check="off"), manifest(region="us-east-1"), profile(region="eu-west-3"))
    assert check(p, "region").status == "skipped"
    assert p.warnings == []


def test_unknown_server_region_is_skipped() -> None:
    c = check(plan(man=manifest(region="us-east-1"), prof=profile(region=None)), "region")
    assert c.status == "skipped"
    assert "region" in c.message and "extra" in c.message


# --- strategy ------------------------------------------------------------------------


def test_auto_goes_distributed_with_more_files_than_nodes() -> None:
    p = plan(man=manifest(files=12), prof=profile(nodes=3, tbl=distributed_table()))
    assert p.strategy == "distributed"
    assert p.cluster == "c3"
    assert p.settings.values["parallel_distributed_insert_select"] == 2
    assert check(p, "files_vs_nodes").status == "ok"


def test_auto_stays_single_with_few_files() -> None:
    p = plan(man=manifest(files=2), prof=profile(nodes=3, tbl=distributed_table()))
    assert p.strategy == "single"
    assert p.cluster is None
    assert "2 files for 3 nodes" in p.strategy_reason
    assert "more files than nodes" in p.strategy_reason
    assert "parallel_distributed_insert_select" not in p.settings.values


def test_auto_stays_single_on_plain_merge_tree() -> None:
    p = plan(man=manifest(files=12), prof=profile(nodes=3, tbl=table("MergeTree")))
    assert p.strategy == "single"
    assert "MergeTree" in p.strategy_reason


def test_auto_stays_single_without_cluster() -> None:
    p = plan(man=manifest(files=12), prof=profile(tbl=distributed_table()))
    assert p.strategy == "single"
    assert "no cluster" in p.strategy_reason
    assert check(p, "files_vs_nodes").status == "skipped"


def test_replicated_target_can_go_distributed() -> None:
    p = plan(man=manifest(files=12), prof=profile(nodes=3, tbl=table("ReplicatedMergeTree")))
    assert p.strategy == "distributed"


def test_distributed_over_non_merge_tree_is_not_possible() -> None:
    p = plan(man=manifest(files=12), prof=profile(nodes=3, tbl=distributed_table(local_engine="Log")))
    assert p.strategy == "single"


def test_distributed_table_on_another_cluster_is_not_possible() -> None:
    p = plan(man=manifest(files=12), prof=profile(nodes=3, tbl=distributed_table(cluster="other")))
    assert p.strategy == "single"
    assert "other" in p.strategy_reason


def test_single_forced() -> None:
    p = plan(request(strategy="single"), manifest(files=12), profile(nodes=3, tbl=distributed_table()))
    assert p.strategy == "single"


def test_forced_distributed_on_plain_merge_tree_fails() -> None:
    with pytest.raises(PlanError) as err:
        plan(request(strategy="distributed"), manifest(files=12), profile(nodes=3, tbl=table("MergeTree")))
    message = str(err.value)
    assert "MergeTree" in message and "strategy='auto'" in message


def test_forced_distributed_with_few_files_warns() -> None:
    p = plan(request(strategy="distributed"), manifest(files=2), profile(nodes=3, tbl=distributed_table()))
    assert p.strategy == "distributed"
    c = check(p, "files_vs_nodes")
    assert c.status == "warn" and "idle" in c.message


def test_distributed_splits_the_cap_per_node() -> None:
    p = plan(request(memory_cap="24GiB"), manifest(files=12), profile(nodes=3, tbl=distributed_table()))
    assert p.budget_bytes == 8 * GiB
    assert p.settings.values["max_memory_usage"] == 8 * GiB
    assert "per-node share of the cap" in p.budget_reason


def test_distributed_without_cap_uses_each_node_share() -> None:
    p = plan(man=manifest(files=12), prof=profile(memory=32 * GiB, nodes=3, tbl=distributed_table()))
    assert p.budget_bytes == 16 * GiB


def test_distributed_threads_follow_the_smallest_node() -> None:
    p = plan(man=manifest(files=12), prof=profile(cores=16, nodes=3, tbl=distributed_table(), node_cores=[16, 8, 12]))
    assert p.settings.values["max_insert_threads"] == 4


def test_distributed_cap_below_minimum_per_node_fails() -> None:
    with pytest.raises(PlanError, match="per node"):
        plan(request(memory_cap="150MiB"), manifest(files=12), profile(nodes=3, tbl=distributed_table()))


# --- plan contents -------------------------------------------------------------------


def test_plan_carries_inputs() -> None:
    p = plan(request(structure="a UInt8", compression="zstd"), manifest(files=3))
    assert p.source_url == SOURCE_URL
    assert str(p.table) == "db.events"
    assert p.format == "Parquet"
    assert p.compression == "zstd"
    assert p.structure == "a UInt8"
    assert p.manifest["files"] == 3
    assert [c.name for c in p.checks] == ["region", "files_vs_nodes", "workload", "credentials"]
    assert "s3_credentials='forward'" in p.checks[-1].message and p.access is None


def test_nameless_format_without_structure_warns() -> None:
    p = plan(man=manifest(fmt="CSV"))
    assert any("no column names" in w for w in p.warnings)
    assert not any("no column names" in w for w in plan(request(structure="a UInt8"), manifest(fmt="CSV")).warnings)
    assert not any("no column names" in w for w in plan(man=manifest(fmt="CSVWithNames")).warnings)


def test_single_load_into_distributed_table_inserts_in_the_foreground() -> None:
    """Rows must be in the shards (and the figures final) when the task ends."""
    p = plan(request(strategy="single"), manifest(), profile(nodes=3, tbl=distributed_table()))
    assert p.strategy == "single"
    assert p.settings.values["distributed_foreground_insert"] == 1
    assert "parallel_distributed_insert_select" not in p.settings.values


def test_distributed_load_does_not_force_foreground_insert() -> None:
    p = plan(request(strategy="distributed"), manifest(files=12), profile(nodes=3, tbl=distributed_table()))
    assert p.strategy == "distributed"
    assert "distributed_foreground_insert" not in p.settings.values


def test_a_cap_above_the_server_memory_warns() -> None:
    p = plan(request(memory_cap="64GiB"), manifest(), profile(memory=32 * GiB))
    assert any("above the server's memory" in w and "memory_cap" in w for w in p.warnings)
    assert not any("above the server's memory" in w for w in plan(request(memory_cap="8GiB"), manifest(),
                                                                   profile(memory=32 * GiB)).warnings)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000/b/*.parquet", "https://minio.example.com/b/x.parquet",
                                 "https://acc.r2.cloudflarestorage.com/b/x.parquet"])
def test_region_check_cannot_judge_other_s3_servers(url: str) -> None:
    req = request(region_check="fail")
    p = make_plan(req, manifest(region="us-east-1"), profile(region="eu-west-3"), source_url=url)
    (region,) = [c for c in p.checks if c.name == "region"]
    assert region.status == "skipped" and "not AWS" in region.message
    with pytest.raises(RegionMismatchError):
        make_plan(req, manifest(region="us-east-1"), profile(region="eu-west-3"),
                  source_url="https://b.s3.us-east-1.amazonaws.com/x.parquet")
