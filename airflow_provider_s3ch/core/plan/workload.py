"""Workload scheduling as the server describes it: the workload a load runs in, its memory limit, the DDL.

ClickHouse admits a query with ``SETTINGS workload = 'w', reserve_memory = N`` once ``N`` bytes
of ``w``'s memory are free, where a ``MEMORY RESERVATION`` resource exists: the smallest
``max_memory`` on the path from ``w`` up to the root workload bounds what the queries it runs
at once reserve together. A reservation above that limit is refused at once (error 776,
``RESOURCE_LIMIT_EXCEEDED``). A workload the server does not know, or a server without a
``MEMORY RESERVATION`` resource, runs the query at once, unscheduled, without an error: hence
the plan's check (:func:`airflow_provider_s3ch.core.plan.checks.workload_check`).

The server keeps the entities in ``system.workloads`` (name, parent, ``create_query``) and
``system.resources`` (name, ``create_query``); ``max_memory`` is read from the
``create_query``, the only place the server shows it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.core.server_models import NodeWorkloads, ServerProfile, WorkloadEntity
from airflow_provider_s3ch.core.sizes import GiB, MiB

#: The root workload and the workload of loads in the DDL the plan suggests.
ROOT_WORKLOAD = "all"
MEMORY_RESOURCE = "memory"

#: ClickHouse's units in a workload's sizes: K, M, G, T, P, E are powers of 1000, Ki, Mi, ... of 1024
#: (``max_memory = '3G'`` is 2.79 GiB on the server, ``'3Gi'`` 3 GiB; no fractions, no ``B``).
_UNITS = {
    "": 1,
    **{unit: 1000**i for i, unit in enumerate("KMGTPE", start=1)},
    **{unit + "i": 1024**i for i, unit in enumerate("KMGTPE", start=1)},
}
_SIZE_RE = re.compile(r"\s*(\d+)\s*([KMGTPE]i?)?\s*")
_PLAIN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SETTING_RE = re.compile(
    r"""^\s*(?P<name>\w+)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|[^\s,]+)"""
    r"""(?:\s+FOR\s+(?P<resource>`(?:[^`\\]|\\.)*`|"(?:[^"\\]|\\.)*"|\w+))?\s*$""",
    re.I | re.S,
)


def parse_size(text: object) -> int | None:
    """A size as ClickHouse writes it in a workload or a setting: ``3221225472``, ``'3Gi'``, ``'3G'``.

    :return: bytes, or None when the text is not such a size.
    """
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text
    m = _SIZE_RE.fullmatch(str(text).strip().strip("'"))
    return int(m.group(1)) * _UNITS[m.group(2) or ""] if m else None


def server_size(n: int) -> str:
    """A size for a DDL statement: ``'3Gi'``, ``'512Mi'`` or bytes."""
    for unit, size in (("Gi", GiB), ("Mi", MiB)):
        if n >= size and n % size == 0:
            return f"'{n // size}{unit}'"
    return str(n)


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`\"'":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def _settings_clause(create_query: str) -> str:
    """What follows the top-level ``SETTINGS`` keyword of a ``CREATE WORKLOAD`` (outside quotes), or ''."""
    quote = ""
    i = 0
    while i < len(create_query):
        ch = create_query[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "`\"'":
            quote = ch
        elif create_query[i : i + 8].upper() == "SETTINGS" and (i == 0 or not create_query[i - 1].isalnum()):
            return create_query[i + 8 :]
        i += 1
    return ""


def _split_top(text: str) -> list[str]:
    """Split on commas outside quotes."""
    out, buf, quote, i = [], "", "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            buf += ch
            if ch == "\\" and i + 1 < len(text):
                buf += text[i + 1]
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "`\"'":
            quote = ch
            buf += ch
        elif ch == ",":
            out.append(buf)
            buf = ""
        else:
            buf += ch
        i += 1
    if buf.strip():
        out.append(buf)
    return out


def workload_settings(create_query: str) -> list[tuple[str, str, str | None]]:
    """The settings of a ``CREATE WORKLOAD``: (name, value, the resource after ``FOR`` or None)."""
    out = []
    for item in _split_top(_settings_clause(create_query)):
        m = _SETTING_RE.match(item)
        if m:
            resource = m.group("resource")
            out.append((m.group("name").lower(), _unquote(m.group("value")), _unquote(resource) if resource else None))
    return out


def memory_resources(node: NodeWorkloads) -> list[str]:
    """The node's ``MEMORY RESERVATION`` resources."""
    return [
        r.name for r in node.resources or []
        if re.search(r"\(\s*MEMORY\s+RESERVATION\s*\)", r.create_query, re.I)
    ]  # fmt: skip


def own_max_memory(entity: WorkloadEntity, resources: list[str]) -> int | None:
    """The workload's own ``max_memory`` for the memory resources (one without ``FOR`` is for every resource)."""
    limits = [
        parse_size(value)
        for name, value, resource in workload_settings(entity.create_query)
        if name == "max_memory" and (resource is None or resource in resources)
    ]
    known = [v for v in limits if v is not None]
    return min(known) if known else None


class WorkloadLimit(NamedTuple):
    """The memory limit a workload's reservations meet: the smallest ``max_memory`` on its path."""

    bytes: int | None
    #: The workload that sets it (None when no workload on the path sets one).
    source: str | None
    #: The workload, its parent, ... up to the root.
    path: list[str]


def workload_limit(name: str, node: NodeWorkloads) -> WorkloadLimit | None:
    """The memory limit of workload ``name`` on one node; None when the node has no such workload."""
    by_name = {w.name: w for w in node.workloads or []}
    if name not in by_name:
        return None
    resources = memory_resources(node)
    path: list[str] = []
    best: tuple[int, str] | None = None
    current: str | None = name
    while current and current in by_name and current not in path:
        path.append(current)
        limit = own_max_memory(by_name[current], resources)
        if limit is not None and (best is None or limit < best[0]):
            best = (limit, current)
        current = by_name[current].parent or None
    return WorkloadLimit(best[0] if best else None, best[1] if best else None, path)


def chosen_workload(request: LoadRequest, profile: ServerProfile) -> tuple[str | None, str]:
    """The workload the load runs in, and where it comes from.

    The task's ``workload`` argument; else the connection's extra ``workload``; ``workload=''``
    runs the load without one whatever the connection says.

    :return: the name (None for none) and a few words on where it comes from.
    """
    if request.workload == "":
        extra = f"; the connection's workload {profile.workload!r} is not used" if profile.workload else ""
        return None, f"workload='' runs the load without a workload{extra}"
    if request.workload is not None:
        return request.workload, "the task's workload argument"
    if profile.workload:
        return profile.workload, "the connection extra 'workload'"
    return None, "no workload is configured (neither the task's workload argument nor the connection extra 'workload')"


def name_sql(name: str) -> str:
    """A workload's or resource's name in DDL: as is when plain, else backtick-quoted."""
    if _PLAIN_NAME_RE.match(name):
        return name
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def missing_ddl(name: str, node: NodeWorkloads, reserve: int, suggested_max: int) -> list[str]:
    """The statements that give ``node`` a memory resource and workload ``name``.

    :param name: the load's workload.
    :param node: what the node has.
    :param reserve: what the load reserves there.
    :param suggested_max: the ``max_memory`` to suggest for a new root workload.
    """
    ddl = []
    if not memory_resources(node):
        ddl.append(f"CREATE RESOURCE {MEMORY_RESOURCE} (MEMORY RESERVATION)")
    names = {w.name for w in node.workloads or []}
    if name not in names:
        roots = [w.name for w in node.workloads or [] if not w.parent]
        if roots:
            ddl.append(f"CREATE WORKLOAD {name_sql(name)} IN {name_sql(roots[0])}")
        elif name == ROOT_WORKLOAD:
            ddl.append(
                f"CREATE WORKLOAD {name_sql(name)} SETTINGS max_memory = {server_size(max(reserve, suggested_max))}"
            )
        else:
            ddl.append(
                f"CREATE WORKLOAD {ROOT_WORKLOAD} SETTINGS max_memory = {server_size(max(reserve, suggested_max))}"
            )
            ddl.append(f"CREATE WORKLOAD {name_sql(name)} IN {ROOT_WORKLOAD}")
    return ddl
