"""Workload scheduling in the pure core: the planned settings, the check, error 776, the admission wait."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_s3ch.core.errors import PlanError, classify_server_error
from airflow_provider_s3ch.core.metrics import QUERY_LOG_COLUMNS, QueryLogRow, load_metrics, summary
from airflow_provider_s3ch.core.models import LoadPlan, LoadRequest, Manifest, S3Object
from airflow_provider_s3ch.core.plan import GiB, MiB, make_plan
from airflow_provider_s3ch.core.plan.workload import (
    chosen_workload,
    parse_size,
    workload_limit,
    workload_settings,
)
from airflow_provider_s3ch.core.server_models import (
    ClusterNode,
    NodeWorkloads,
    ServerProfile,
    TableInfo,
    WorkloadEntity,
)

SOURCE_URL = "http://127.0.0.1:9/bucket/data/*.parquet"
RESOURCE = WorkloadEntity(name="memory", create_query="CREATE RESOURCE memory (MEMORY RESERVATION)")
ROOT_3GI = WorkloadEntity(name="all", create_query="CREATE WORKLOAD `all` SETTINGS max_memory = '3Gi'")
LOADS = WorkloadEntity(name="loads", parent="all", create_query="CREATE WORKLOAD loads IN `all`")


def request(**kwargs: Any) -> LoadRequest:
    return LoadRequest(**{"s3_uri": "s3://bucket/data/*.parquet", "table": "db.events", **kwargs})


def manifest(files: int = 12) -> Manifest:
    objects = [S3Object(key=f"data/part-{i}.parquet", size=10 * MiB) for i in range(files)]
    return Manifest(bucket="bucket", pattern="data/*.parquet", prefix="data/", objects=objects, format="Parquet")


def node(address: str = "ch0:9000", *, initiator: bool = True, member: bool = False,
         workloads: list[WorkloadEntity] | None = None, resources: list[WorkloadEntity] | None = None,
         readable: bool = True) -> NodeWorkloads:
    if not readable:
        return NodeWorkloads(node=address, initiator=initiator, member=member, error="Code: 60. Unknown table")
    return NodeWorkloads(
        node=address, initiator=initiator, member=member,
        workloads=[ROOT_3GI, LOADS] if workloads is None else workloads,
        resources=[RESOURCE] if resources is None else resources,
    )


def profile(*, workload: str | None = None, nodes: list[NodeWorkloads] | None = None, cluster_nodes: int = 0,
            distributed_target: bool = False) -> ServerProfile:
    table = TableInfo(database="db", name="events", engine="MergeTree")
    if distributed_target:
        table = TableInfo(database="db", name="events", engine="Distributed", dist_cluster="c3",
                          local_database="db", local_table="events_local", local_engine="MergeTree")
    return ServerProfile(
        version="26.9", cores=8, memory_bytes=32 * GiB, memory_source="test", workload=workload,
        cluster="c3" if cluster_nodes else None,
        nodes=[ClusterNode(host=f"ch{i}", port=9000, is_local=i == 0) for i in range(cluster_nodes)],
        table=table,
        workload_nodes=[node()] if nodes is None else nodes,
    )


def cluster(**first: Any) -> list[NodeWorkloads]:
    """Three cluster nodes, the first the connection's (``first`` changes it)."""
    return [node("ch0:9000", member=True, **first)] + [
        node(f"ch{i}:9000", initiator=False, member=True) for i in (1, 2)
    ]


def plan(req: LoadRequest | None = None, prof: ServerProfile | None = None, files: int = 12) -> LoadPlan:
    return make_plan(req or request(), manifest(files), prof or profile(), source_url=SOURCE_URL)


def workload_check(p: LoadPlan) -> Any:
    (check,) = [c for c in p.checks if c.name == "workload"]
    return check


# --- what the server writes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [("3Gi", 3 * GiB), ("'3Gi'", 3 * GiB), ("3G", 3_000_000_000), ("512Mi", 512 * MiB), ("2K", 2000),
     ("3221225472", 3 * GiB), (3 * GiB, 3 * GiB), ("1Ti", 1024 * GiB), ("1.5Gi", None), ("3GB", None),
     ("lots", None), (True, None)],
)
def test_sizes_read_as_the_server_reads_them(text: object, size: int | None) -> None:
    assert parse_size(text) == size


def test_workload_settings_with_for_clauses_and_quotes() -> None:
    query = ("CREATE WORKLOAD `odd, name` IN `all` SETTINGS max_memory = '2Gi' FOR memory, priority = 1, "
             "max_io_requests = 10 FOR `s3 disk`, weight = 3")
    assert workload_settings(query) == [
        ("max_memory", "2Gi", "memory"), ("priority", "1", None), ("max_io_requests", "10", "s3 disk"),
        ("weight", "3", None),
    ]
    assert workload_settings("CREATE WORKLOAD `SETTINGS` IN `all`") == []


def test_the_limit_is_the_smallest_max_memory_on_the_path() -> None:
    child = WorkloadEntity(
        name="loads", parent="all", create_query="CREATE WORKLOAD loads IN `all` SETTINGS max_memory = '2Gi'"
    )
    limit = workload_limit("loads", node(workloads=[ROOT_3GI, child]))
    assert limit is not None and (limit.bytes, limit.source, limit.path) == (2 * GiB, "loads", ["loads", "all"])
    limit = workload_limit("loads", node())
    assert limit is not None and (limit.bytes, limit.source) == (3 * GiB, "all")
    assert workload_limit("other", node()) is None


def test_a_limit_for_another_resource_does_not_bound_memory() -> None:
    io_only = WorkloadEntity(name="all", create_query="CREATE WORKLOAD `all` SETTINGS max_memory = '1Gi' FOR disk")
    limit = workload_limit("loads", node(workloads=[io_only, LOADS]))
    assert limit is not None and limit.bytes is None
    for_memory = WorkloadEntity(name="all", create_query="CREATE WORKLOAD `all` SETTINGS max_memory = '1Gi' FOR memory")
    limit = workload_limit("loads", node(workloads=[for_memory, LOADS]))
    assert limit is not None and limit.bytes == GiB


# --- which workload, and the settings -------------------------------------------------------------


def test_the_task_argument_wins_over_the_connection_and_empty_turns_it_off() -> None:
    conn = profile(workload="loads")
    assert chosen_workload(request(), conn) == ("loads", "the connection extra 'workload'")
    assert chosen_workload(request(workload="batch"), conn) == ("batch", "the task's workload argument")
    name, why = chosen_workload(request(workload=""), conn)
    assert name is None and "'loads' is not used" in why
    assert chosen_workload(request(), profile())[0] is None


def test_a_workload_reserves_the_per_node_budget() -> None:
    p = plan(request(memory_cap="2GiB", workload="loads"))
    values, reasons = p.settings.values, p.settings.reasons
    assert values["workload"] == "loads" and values["reserve_memory"] == values["max_memory_usage"] == 2 * GiB
    assert "the task's workload argument" in reasons["workload"]
    assert "per-node memory budget 2 GiB" in reasons["reserve_memory"]


def test_the_connection_workload_applies_and_is_named_in_the_reason() -> None:
    p = plan(request(memory_cap="1GiB"), profile(workload="loads"))
    assert p.settings.values["workload"] == "loads"
    assert "connection extra 'workload'" in p.settings.reasons["workload"]


def test_without_a_workload_the_check_says_none_is_configured() -> None:
    p = plan(request(memory_cap="2GiB"))
    assert "workload" not in p.settings.values and "reserve_memory" not in p.settings.values
    check = workload_check(p)
    assert check.status == "skipped" and "no workload is configured" in check.message
    off = workload_check(plan(request(workload=""), profile(workload="loads")))
    assert off.status == "skipped" and "workload=''" in off.message


def test_a_fitting_reservation_is_ok_and_says_how_many_run_at_once() -> None:
    check = workload_check(plan(request(memory_cap="1GiB", workload="loads")))
    assert check.status == "ok"
    assert "reserves 1 GiB of 3 GiB (max_memory of workload 'all')" in check.message
    assert "3 such loads at once" in check.message
    assert "1 such load at once" in workload_check(plan(request(memory_cap="2GiB", workload="loads"))).message


# --- failures before anything runs ----------------------------------------------------------------


def test_a_cap_above_max_memory_is_refused_naming_776() -> None:
    with pytest.raises(PlanError) as info:
        plan(request(memory_cap="4GiB", workload="loads"))
    text = str(info.value)
    assert "above the limit of workload 'loads', 3 GiB (max_memory of workload 'all')" in text
    assert "error 776 RESOURCE_LIMIT_EXCEEDED" in text and "lower memory_cap to at most 3 GiB" in text


def test_a_reserve_memory_override_is_what_is_checked() -> None:
    with pytest.raises(PlanError, match="reserve_memory is set in settings"):
        plan(request(memory_cap="1GiB", workload="loads", settings={"reserve_memory": "4Gi"}))
    p = plan(request(memory_cap="4GiB", workload="loads", settings={"reserve_memory": "1Gi"}))
    assert workload_check(p).status == "ok" and p.settings.values["reserve_memory"] == "1Gi"


def test_a_missing_workload_fails_with_the_ddl() -> None:
    with pytest.raises(PlanError) as info:
        plan(request(memory_cap="1GiB", workload="nightly"))
    text = str(info.value)
    assert "workload 'nightly' is not set up" in text and "system.workloads lists: all, loads" in text
    assert "CREATE WORKLOAD nightly IN all;" in text and "CREATE RESOURCE" not in text


def test_a_missing_resource_and_root_fail_with_all_the_ddl() -> None:
    bare = profile(nodes=[node(workloads=[], resources=[])])
    with pytest.raises(PlanError) as info:
        plan(request(memory_cap="2GiB", workload="loads"), bare)
    text = str(info.value)
    assert "no MEMORY RESERVATION resource" in text
    assert "CREATE RESOURCE memory (MEMORY RESERVATION);" in text
    assert "CREATE WORKLOAD all SETTINGS max_memory = '16Gi';" in text  # half the server's 32 GiB
    assert "CREATE WORKLOAD loads IN all;" in text


def test_a_query_slot_resource_is_not_a_memory_resource() -> None:
    slots = WorkloadEntity(name="q", create_query="CREATE RESOURCE q (QUERY)")
    with pytest.raises(PlanError, match="CREATE RESOURCE memory"):
        plan(request(memory_cap="1GiB", workload="loads"), profile(nodes=[node(resources=[slots])]))


def test_unreadable_workloads_on_the_connections_node_fail() -> None:
    with pytest.raises(PlanError, match="cannot read system.workloads and system.resources on ch0:9000"):
        plan(request(memory_cap="1GiB", workload="loads"), profile(nodes=[node(readable=False)]))


def test_a_reservation_of_nothing_warns() -> None:
    check = workload_check(plan(request(memory_cap="1GiB", workload="loads", settings={"reserve_memory": 0})))
    assert check.status == "warn" and "reserves nothing" in check.message


def test_a_workload_without_max_memory_warns_that_loads_run_at_once() -> None:
    free = WorkloadEntity(name="all", create_query="CREATE WORKLOAD `all`")
    p = plan(request(memory_cap="1GiB", workload="loads"), profile(nodes=[node(workloads=[free, LOADS])]))
    check = workload_check(p)
    assert check.status == "warn" and "no max_memory on its path (loads -> all)" in check.message
    assert check.message in p.warnings


# --- loads over several nodes ----------------------------------------------------------------------


def test_a_distributed_load_reserves_on_every_node_and_twice_on_its_initiator() -> None:
    p = plan(request(memory_cap="3GiB", workload="loads"), profile(nodes=cluster(), cluster_nodes=3,
                                                                   distributed_target=True))
    assert p.strategy == "distributed" and p.settings.values["reserve_memory"] == GiB
    check = workload_check(p)
    assert check.status == "ok" and "on 3 nodes" in check.message and "2 x 1 GiB" in check.message
    assert "Airflow pool" in check.message
    with pytest.raises(PlanError) as info:  # 2 GiB per node: 4 GiB on the initiator, above 3 GiB
        plan(request(memory_cap="6GiB", workload="loads"), profile(nodes=cluster(), cluster_nodes=3,
                                                                   distributed_target=True))
    text = str(info.value)
    assert "two reservations on its initiator ch0:9000" in text and "for ever" in text
    assert "lower memory_cap to at most 4.50 GiB" in text and "strategy='single'" in text


def test_every_node_needs_its_own_workload() -> None:
    nodes = cluster()
    nodes[2] = node("ch2:9000", initiator=False, member=True, workloads=[], resources=[])
    with pytest.raises(PlanError) as info:
        plan(request(memory_cap="3GiB", workload="loads"), profile(nodes=nodes, cluster_nodes=3,
                                                                   distributed_target=True))
    text = str(info.value)
    assert "on ch2:9000:" in text and "on ch0:9000:" not in text and "on every node the load runs on" in text


def test_a_single_node_load_checks_the_connections_node_only() -> None:
    nodes = cluster()
    nodes[2] = node("ch2:9000", initiator=False, member=True, workloads=[], resources=[])
    p = plan(request(memory_cap="2GiB", workload="loads"), profile(nodes=nodes, cluster_nodes=3))
    assert p.strategy == "single" and workload_check(p).status == "ok"


def test_an_unreachable_node_of_a_distributed_load_warns() -> None:
    nodes = cluster()
    nodes[1] = node("ch1:9000", initiator=False, member=True, readable=False)
    p = plan(request(memory_cap="3GiB", workload="loads"), profile(nodes=nodes, cluster_nodes=3,
                                                                   distributed_target=True))
    check = workload_check(p)
    assert check.status == "warn" and "could not read the workloads of ch1:9000" in check.message


# --- the server's errors and figures --------------------------------------------------------------


def test_776_is_terminal_and_says_what_it_means() -> None:
    message = "Code: 776. DB::Exception: Workload 'loads' allocation of size 4.00 GiB exceeds the limit of 3.00 GiB."
    kind, hint = classify_server_error(776, message)
    assert kind == "terminal"
    assert "reserve_memory" in hint and "max_memory" in hint and "RESOURCE_LIMIT_EXCEEDED" in hint


@pytest.mark.parametrize(("code", "kind"), [(1020, "transient"), (1019, "transient"), (777, "transient"),
                                            (673, "terminal"), (674, "terminal")])
def test_other_workload_errors(code: int, kind: str) -> None:
    assert classify_server_error(code).kind == kind


def _row(query_id: str, node: str, wait_us: int, *, initial: bool = True, written: int = 0, duration: int = 0,
         read: int = 0) -> QueryLogRow:
    return QueryLogRow(node=node, query_id=query_id, initial_query_id="q", written_rows=written, read_rows=read,
                       query_duration_ms=duration, admission_wait_us=wait_us, is_initial_query=initial,
                       Settings={"workload": "loads", "reserve_memory": str(GiB)})


def test_the_admission_wait_is_the_servers_and_separate_from_the_run() -> None:
    assert any("MemoryReservationAdmitMicroseconds" in c and "AS admission_wait_us" in c for c in QUERY_LOG_COLUMNS)
    entry = _row("q", "ch0:9000", 2_999_600, written=10, read=10, duration=4200)
    metrics = load_metrics(entry)
    assert metrics.admission_wait_ms == 3000 and metrics.run_ms == 1200
    result = summary(plan(request(memory_cap="1GiB", workload="loads")), metrics, wall_ms=5000)
    assert result["workload"] == "loads"
    assert (result["admission_wait_ms"], result["run_ms"], result["duration_ms"]) == (3000, 1200, 4200)
    assert result["nodes"][0]["admission_wait_ms"] == 3000
    assert summary(plan(), load_metrics(_row("q", "n", 0, duration=10)), wall_ms=1)["workload"] is None


def test_each_node_reports_its_own_wait() -> None:
    entry = _row("q", "ch0:9000", 1000, duration=900)
    secondary = [_row("s1", "ch1:9000", 400_000, initial=False, written=5, duration=800),
                 _row("s2", "ch1:9000", 100_000, initial=False, written=5, duration=300),
                 _row("s3", "ch2:9000", 0, initial=False, written=7, duration=700)]
    metrics = load_metrics(entry, secondary, distributed=True)
    waits = {n.node: n.admission_wait_ms for n in metrics.nodes}
    assert waits == {"ch1:9000": 400, "ch2:9000": 0} and metrics.admission_wait_ms == 1
