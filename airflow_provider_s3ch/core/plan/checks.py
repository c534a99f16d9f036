"""Pre-flight checks: region, files against nodes, Parquet row groups, nameless formats, the workload."""

from __future__ import annotations

from urllib.parse import urlsplit

from airflow_provider_s3ch.core.errors import PlanError, RegionMismatchError
from airflow_provider_s3ch.core.formats import NAMELESS_FORMATS
from airflow_provider_s3ch.core.models import Check, InsertSettings, LoadRequest, Manifest
from airflow_provider_s3ch.core.plan.budget import DEFAULT_MEMORY_SHARE, Budget
from airflow_provider_s3ch.core.plan.settings import ROW_GROUP_MEMORY_FACTOR
from airflow_provider_s3ch.core.plan.workload import (
    WorkloadLimit,
    chosen_workload,
    memory_resources,
    missing_ddl,
    name_sql,
    parse_size,
    server_size,
    workload_limit,
)
from airflow_provider_s3ch.core.server_models import NodeWorkloads, ServerProfile
from airflow_provider_s3ch.core.sizes import fmt_bytes

#: Hosts of AWS S3 endpoints (regional, dual-stack, FIPS, VPC endpoints, China).
AWS_S3_HOST_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn")


def region_check(request: LoadRequest, manifest: Manifest, profile: ServerProfile, source_url: str = "") -> Check:
    """Compare the bucket's region with the server's, under ``request.region_check``.

    Only AWS's answer to GetBucketLocation can be judged: other S3 servers (MinIO, Ceph, R2,
    s3rver...) answer an empty or fixed location whatever the bucket's place, so on an endpoint
    that is not AWS the check says it cannot judge.

    :param request: the request (its ``region_check``: warn, fail or off).
    :param manifest: the objects (the bucket's region).
    :param profile: the server (its region, from the connection extra ``region``).
    :param source_url: the URL ClickHouse reads (its host tells AWS from other S3 servers).
    :return: the check; status warn carries the warning text.
    :raises RegionMismatchError: the regions differ and the policy is ``fail``.
    """
    if request.region_check == "off":
        return Check(name="region", status="skipped", message="region_check='off'")
    host = urlsplit(source_url).hostname or ""
    if source_url and not host.endswith(AWS_S3_HOST_SUFFIXES):
        return Check(
            name="region",
            status="skipped",
            message=f"the S3 endpoint {host} is not AWS: its bucket locations cannot be judged, so the region "
            "check cannot tell where the data is",
        )
    if profile.region is None:
        return Check(
            name="region",
            status="skipped",
            message="ClickHouse's region is unknown; set the connection extra 'region' to enable this check",
        )
    if manifest.region is None:
        return Check(name="region", status="skipped", message=f"bucket '{manifest.bucket}' region is unknown")
    if manifest.region.strip().lower() == profile.region.strip().lower():
        return Check(name="region", status="ok", message=f"bucket and ClickHouse are both in {profile.region}")
    message = (
        f"bucket '{manifest.bucket}' is in {manifest.region} but ClickHouse is in {profile.region}: "
        "cross-region reads are slower and cost egress; move the data or set region_check='off'"
    )
    if request.region_check == "fail":
        raise RegionMismatchError(message)
    return Check(name="region", status="warn", message=message)


def files_vs_nodes_check(manifest: Manifest, profile: ServerProfile, distributed: bool) -> Check:
    """The file count against the node count: s3Cluster hands out whole files.

    :param manifest: the objects.
    :param profile: the server.
    :param distributed: whether the plan is distributed.
    :return: ok, warn (distributed with fewer files than nodes) or skipped (one node).
    """
    files, nodes = manifest.file_count, profile.node_count
    if not profile.cluster or nodes <= 1:
        return Check(name="files_vs_nodes", status="skipped", message="single node: no cluster to spread files over")
    if not distributed:
        return Check(
            name="files_vs_nodes",
            status="ok",
            message=f"{files} files, {nodes} nodes: the load runs on one node",
        )
    if files < nodes:
        return Check(
            name="files_vs_nodes",
            status="warn",
            message=(
                f"{files} files for {nodes} nodes: s3Cluster splits work per file, so "
                f"{nodes - files} node(s) will be idle; strategy='auto' would run on one node"
            ),
        )
    return Check(name="files_vs_nodes", status="ok", message=f"{files} files for {nodes} nodes")


def row_group_check(manifest: Manifest, budget: Budget) -> str | None:
    """Warn when even one thread reading the largest Parquet row group would exceed the budget.

    At full speed ClickHouse reads a row group's column chunks whole, so under a cap below
    ~:data:`ROW_GROUP_MEMORY_FACTOR` x the largest row group the first attempt stops with
    MEMORY_LIMIT_EXCEEDED (the cap holds: ``max_memory_usage`` enforces it); the memory step-down's
    last steps read in small Parquet blocks and fit where the rest of the load does (the benchmark's
    256 MiB cap on 204 MiB row groups: a 227 MiB peak), slower.

    :param manifest: the objects (``max_row_group_bytes`` from the footers, if read).
    :param budget: the per-node memory budget.
    :return: a warning, or None.
    """
    group = manifest.max_row_group_bytes
    if not group or budget.per_node >= ROW_GROUP_MEMORY_FACTOR * group:
        return None
    return (
        f"the largest Parquet row group is {fmt_bytes(group)} uncompressed (footers); reading it takes "
        f"~{ROW_GROUP_MEMORY_FACTOR}x that, ~{fmt_bytes(ROW_GROUP_MEMORY_FACTOR * group)}, above the per-node budget "
        f"{fmt_bytes(budget.per_node)}: the first attempt will likely stop with MEMORY_LIMIT_EXCEEDED, and a "
        "load through a staging table then steps down to smaller reads (one thread, Parquet blocks of 8,192 rows: "
        "slower; a load straight into the target stops); raise memory_cap or write the files with smaller row "
        "groups"
    )


def structure_check(fmt: str, structure: str | None) -> str | None:
    """Warn when the format has no column names and no ``structure`` is given.

    :param fmt: the ClickHouse format name.
    :param structure: the request's structure.
    :return: a warning, or None.
    """
    if structure is None and fmt.lower() in NAMELESS_FORMATS:
        return (
            f"format {fmt} carries no column names: columns are matched to the table by position; "
            f"give structure='col Type, ...' or use a format with names (e.g. {fmt}WithNames where it exists)"
        )
    return None


def workload_check(
    request: LoadRequest, profile: ServerProfile, settings: InsertSettings, budget: Budget, distributed: bool
) -> Check:
    """Whether the server will admit the load by its memory reservation, in the workload it names.

    ClickHouse runs a query whose workload it does not know, or on a server without a
    ``MEMORY RESERVATION`` resource, at once and unscheduled, without an error; a reservation
    above the workload's ``max_memory`` it refuses at once (error 776). So before anything runs
    the nodes the load reserves memory on must have both, with room for the reservation:

    - the connection's node (the initiator): ``reserve_memory``; for a distributed load that
      node also runs a share, which reserves again while the load's own query holds its
      reservation: twice ``reserve_memory``;
    - for a distributed load, and a load into a Distributed table on a cluster, every other
      node: ``reserve_memory`` (their queries carry the load's settings).

    :param request: the request (its workload and memory cap, for the messages).
    :param profile: the server (the connection's workload, each node's workloads and resources).
    :param settings: the planned settings (``workload`` and ``reserve_memory`` after the user's overrides).
    :param budget: the per-node memory budget.
    :param distributed: whether the plan is distributed.
    :return: skipped (no workload), ok, or warn (no limit on the workload's path, a node that
        could not be read); the message says which.
    :raises PlanError: the workload or the memory resource is missing on a node (the message
        holds the DDL to run), its tables cannot be read on the initiator, or the reservation
        cannot fit the workload's limit.
    """
    name = settings.values.get("workload")
    if not name:
        _, why = chosen_workload(request, profile)
        return Check(
            name="workload",
            status="skipped",
            message=f"{why}: the server admits the load at once, whatever else runs on it; give a workload to "
            "have the server admit loads by their memory caps (docs/many-loads.md)",
        )
    name = str(name)
    reserve = parse_size(settings.values.get("reserve_memory", 0)) or 0
    initiator = _read_initiator(name, profile)
    spans_nodes = distributed or (profile.table.is_distributed and profile.node_count > 1)
    needs, unread = _reservations(profile, initiator, reserve, distributed=distributed, spans_nodes=spans_nodes)

    suggested = max(reserve * 2, int(profile.memory_bytes * DEFAULT_MEMORY_SHARE))
    missing = [(node, missing_ddl(name, node, reserve, suggested)) for node, _ in needs]
    missing = [(node, ddl) for node, ddl in missing if ddl]
    if missing:
        raise PlanError(_missing_message(name, missing, spans_nodes))

    limits = [(node, need, workload_limit(name, node)) for node, need in needs]
    for node, need, limit in limits:
        assert limit is not None  # the workload exists: checked above
        if limit.bytes is not None and need > limit.bytes:
            raise PlanError(_over_message(request, name, node, reserve, need, limit, budget, profile, distributed))

    problems = _admission_problems(name, settings, reserve, limits, unread)
    fits = [
        (node, need, limit)
        for node, need, limit in limits
        if need > 0 and limit is not None and limit.bytes is not None
    ]
    summary = _fits_message(name, reserve, fits, spans_nodes, distributed)
    if problems:
        return Check(name="workload", status="warn", message="; ".join([*problems, summary] if fits else problems))
    return Check(name="workload", status="ok", message=summary)


def _read_initiator(name: str, profile: ServerProfile) -> NodeWorkloads:
    """The connection's node's workloads and resources; :class:`PlanError` when they could not be read."""
    initiator = next((n for n in profile.workload_nodes if n.initiator), None)
    if initiator is None or initiator.workloads is None or initiator.resources is None:
        where = initiator.node if initiator is not None else "the connection's node"
        why = f" ({initiator.error})" if initiator is not None and initiator.error else ""
        raise PlanError(
            f"workload {name!r}: cannot read system.workloads and system.resources on {where}{why}, so whether the "
            "server will schedule the load cannot be checked (a workload it does not know runs the load at once, "
            "unscheduled); grant the user SELECT on system.workloads and system.resources, or run the load without "
            "a workload "
            "(workload='')"
        )
    return initiator


def _reservations(
    profile: ServerProfile, initiator: NodeWorkloads, reserve: int, *, distributed: bool, spans_nodes: bool
) -> tuple[list[tuple[NodeWorkloads, int]], list[str]]:
    """(each node the load reserves memory on, with what it reserves there), and the member nodes whose
    workloads could not be read (each with its error)."""
    needs: list[tuple[NodeWorkloads, int]] = [(initiator, reserve * (2 if distributed and initiator.member else 1))]
    unread: list[str] = []
    if spans_nodes:
        for node in profile.workload_nodes:
            if not node.member or node.initiator:
                continue
            if node.workloads is None or node.resources is None:
                unread.append(f"{node.node}{f' ({node.error})' if node.error else ''}")
            else:
                needs.append((node, reserve))
    return needs, unread


def _admission_problems(
    name: str, settings: InsertSettings, reserve: int,
    limits: list[tuple[NodeWorkloads, int, WorkloadLimit | None]], unread: list[str],
) -> list[str]:
    """Why the server may admit the load at once where a limit should queue it, or cannot be told."""
    unlimited = [(node.node, limit.path) for node, _, limit in limits if limit is not None and limit.bytes is None]
    problems = []
    if unlimited:
        path = " -> ".join(unlimited[0][1])
        problems.append(
            f"workload {name!r} has no max_memory on its path ({path}) on {', '.join(n for n, _ in unlimited)}: "
            "reservations there are never queued, so loads are admitted at once; set max_memory on the root "
            "workload (docs/many-loads.md)"
        )
    if reserve <= 0:
        problems.append(
            f"reserve_memory is {settings.values.get('reserve_memory')!r}: the load reserves nothing, so workload "
            f"{name!r} admits it at once, whatever else runs"
        )
    if unread:
        problems.append(
            f"could not read the workloads of {', '.join(unread)}: whether the load's share there is scheduled "
            "cannot be told"
        )
    return problems


def _missing_message(name: str, missing: list[tuple[NodeWorkloads, list[str]]], spans_nodes: bool) -> str:
    lines = []
    for node, ddl in missing:
        what = []
        if not memory_resources(node):
            what.append("no MEMORY RESERVATION resource")
        if name not in {w.name for w in node.workloads or []}:
            known = ", ".join(sorted(w.name for w in node.workloads or [])) or "none"
            what.append(f"no workload {name!r} (system.workloads lists: {known})")
        lines.append(f"on {node.node}: {'; '.join(what)}; run there:\n" + "".join(f"  {d};\n" for d in ddl))
    each = (
        "on every node the load runs on (without Keeper each server keeps its own workloads, and ON CLUSTER "
        "DDL needs Keeper), "
        if spans_nodes
        else ""
    )
    return (
        f"workload {name!r} is not set up: the server would run the load at once, unscheduled, so nothing keeps "
        f"many loads from running out of memory together. Create it, {each}then run the load again, or run it "
        "without a workload (workload='').\n" + "".join(lines).rstrip()
    )


def _over_message(
    request: LoadRequest, name: str, node: NodeWorkloads, reserve: int, need: int, limit: WorkloadLimit,
    budget: Budget, profile: ServerProfile, distributed: bool,
) -> str:
    assert limit.bytes is not None and limit.source is not None
    of = f"the limit of workload {name!r}, {fmt_bytes(limit.bytes)} (max_memory of workload {limit.source!r})"
    raise_it = (
        f"raise max_memory of workload {limit.source!r} "
        f"(CREATE OR REPLACE WORKLOAD {name_sql(limit.source)} …)"
    )
    nodes = profile.node_count if distributed else 1
    if "reserve_memory" in request.settings:
        why, lower = "set in settings", "lower reserve_memory"
    else:
        why = f"the per-node budget: {budget.reason}"
        lower = (
            "lower memory_cap to at most {cap}" if request.memory_cap is not None
            else "set memory_cap to at most {cap}"
        )
    if need > reserve:  # the initiator of a distributed load: its own query and its share
        return (
            f"a distributed load holds two reservations on its initiator {node.node}, its own query's and its "
            f"share's: 2 x {fmt_bytes(reserve)} = {fmt_bytes(need)}, above {of}; the share would wait for memory "
            f"the load itself holds, for ever (reserve_memory is {why}); "
            f"{lower.format(cap=fmt_bytes(limit.bytes // 2 * nodes))}, {raise_it} to at least "
            f"{server_size(need)}, or use strategy='single'"
        )
    return (
        f"the load reserves {fmt_bytes(reserve)} per node, above {of} on {node.node}: the server refuses such a "
        f"reservation at once (error 776 RESOURCE_LIMIT_EXCEEDED), every time (reserve_memory is {why}); "
        f"{lower.format(cap=fmt_bytes(limit.bytes * nodes))}, or {raise_it} to at least "
        f"{server_size(need)}"
    )


def _fits_message(
    name: str, reserve: int, fits: list[tuple[NodeWorkloads, int, WorkloadLimit | None]], spans_nodes: bool,
    distributed: bool,
) -> str:
    if not fits:
        return ""
    node, need, limit = min(fits, key=lambda f: (f[2].bytes or 0) // f[1])  # type: ignore[union-attr]
    assert limit is not None and limit.bytes is not None
    at_once = limit.bytes // need
    where = f"on {node.node}" if len(fits) == 1 else f"on {len(fits)} nodes (the tightest: {node.node})"
    text = (
        f"workload {name!r} {where}: the load reserves {fmt_bytes(need)} of {fmt_bytes(limit.bytes)} "
        f"(max_memory of workload {limit.source!r}) and the server admits it once they are free; "
        f"{at_once} such load{'s' if at_once != 1 else ''} at once"
    )
    if distributed and need > reserve:
        text += f" (its initiator holds 2 x {fmt_bytes(reserve)}: the load's own query and its share)"
    if spans_nodes:
        text += (
            "; a load that spans nodes holds its reservation on one node while it waits on another, so such "
            "loads can wait on each other: bound them with an Airflow pool (docs/many-loads.md)"
        )
    return text
