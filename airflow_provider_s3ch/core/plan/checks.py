"""Pre-flight checks: region, files against nodes, Parquet row groups, nameless formats."""

from __future__ import annotations

from urllib.parse import urlsplit

from airflow_provider_s3ch.core.errors import RegionMismatchError
from airflow_provider_s3ch.core.formats import NAMELESS_FORMATS
from airflow_provider_s3ch.core.models import Check, LoadRequest, Manifest, ServerProfile
from airflow_provider_s3ch.core.plan.budget import Budget
from airflow_provider_s3ch.core.plan.settings import ROW_GROUP_MEMORY_FACTOR
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

    ClickHouse reads a row group's column chunks whole; no setting makes that smaller, so a
    cap below ~:data:`ROW_GROUP_MEMORY_FACTOR` x the largest row group stops the load with
    MEMORY_LIMIT_EXCEEDED (the cap holds: ``max_memory_usage`` enforces it).

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
        f"{fmt_bytes(budget.per_node)}: the load will likely stop with MEMORY_LIMIT_EXCEEDED; raise memory_cap or "
        "write the files with smaller row groups"
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
