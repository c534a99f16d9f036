"""The per-node memory budget: the task's ``memory_cap``, else a share of the server's memory."""

from __future__ import annotations

from typing import NamedTuple

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.core.server_models import ServerProfile
from airflow_provider_s3ch.core.sizes import GiB, MiB, fmt_bytes

#: Share of the server's memory a load may use when the task gives no ``memory_cap``.
#: The guide says: all RAM for an isolated ingest, half or less to leave room for
#: other concurrent work. A scheduled load shares its server, so: half.
DEFAULT_MEMORY_SHARE = 0.5

#: Per-node budget when the server's memory is unknown (``ServerProfile.memory_bytes == 0``)
#: and no ``memory_cap`` is given. Small enough for any production server; the plan
#: warns and asks for a ``memory_cap``.
FALLBACK_BUDGET_BYTES = 4 * GiB

#: Below this per-node budget a load is refused: ClickHouse needs memory for reading,
#: parsing and sorting besides the insert blocks.
MIN_BUDGET_BYTES = 64 * MiB

class Budget(NamedTuple):
    """The per-node memory budget and why."""

    per_node: int
    reason: str
    warning: str | None = None



def memory_budget(request: LoadRequest, profile: ServerProfile, nodes: int) -> Budget:
    """The per-node memory budget (what ``max_memory_usage`` enforces).

    A ``memory_cap`` is for the whole load: each of ``nodes`` nodes gets ``cap // nodes``.
    Without a cap each node gets :data:`DEFAULT_MEMORY_SHARE` of the server's memory, or
    :data:`FALLBACK_BUDGET_BYTES` (with a warning) when that memory is unknown.

    :param request: the request (its ``memory_cap``).
    :param profile: the server (its ``memory_bytes``).
    :param nodes: nodes taking part in the load (1 for a single-node load).
    :return: the budget and its reason.
    :raises PlanError: the per-node budget is below :data:`MIN_BUDGET_BYTES`.
    """
    warning = None
    if request.memory_cap is not None:
        per_node = request.memory_cap // nodes
        if nodes > 1:
            reason = (
                f"memory_cap {fmt_bytes(request.memory_cap)} for the whole load / {nodes} nodes "
                f"= {fmt_bytes(per_node)} (per-node share of the cap)"
            )
        else:
            reason = f"memory_cap {fmt_bytes(request.memory_cap)}"
        if 0 < profile.memory_bytes < per_node:
            warning = (
                f"memory_cap {fmt_bytes(request.memory_cap)} gives {fmt_bytes(per_node)} per node, above the server's "
                f"memory {fmt_bytes(profile.memory_bytes)} ({profile.memory_source}): the server's own limit stops "
                "the load first; lower memory_cap to what the load may really use"
            )
    elif profile.memory_bytes > 0:
        per_node = int(profile.memory_bytes * DEFAULT_MEMORY_SHARE)
        reason = (
            f"{DEFAULT_MEMORY_SHARE:g} of the server's {fmt_bytes(profile.memory_bytes)} "
            f"({profile.memory_source}) = {fmt_bytes(per_node)}"
            f"{' per node' if nodes > 1 else ''}, leaving room for other work (no memory_cap given)"
        )
    else:
        per_node = FALLBACK_BUDGET_BYTES
        reason = f"fallback {fmt_bytes(FALLBACK_BUDGET_BYTES)}: the server's memory is unknown and no memory_cap given"
        warning = (
            f"the server's memory is unknown: the load uses a fallback budget of {fmt_bytes(FALLBACK_BUDGET_BYTES)}"
            f"{' per node' if nodes > 1 else ''}; set memory_cap to size it yourself"
        )
    if per_node < MIN_BUDGET_BYTES:
        raise PlanError(_budget_error(request, profile, nodes, per_node))
    return Budget(per_node, reason, warning)


def _budget_error(request: LoadRequest, profile: ServerProfile, nodes: int, per_node: int) -> str:
    if request.memory_cap is None:
        return (
            f"the server's memory ({fmt_bytes(profile.memory_bytes)}) gives a budget of {fmt_bytes(per_node)}, "
            f"below the minimum {fmt_bytes(MIN_BUDGET_BYTES)}; set memory_cap to at least "
            f"{fmt_bytes(MIN_BUDGET_BYTES * nodes)}"
        )
    share = f" ({fmt_bytes(per_node)} per node over {nodes} nodes)" if nodes > 1 else ""
    return (
        f"memory_cap={request.memory_cap} ({fmt_bytes(request.memory_cap)}){share} is below the minimum "
        f"{fmt_bytes(MIN_BUDGET_BYTES)} per node; raise memory_cap to at least "
        f"{fmt_bytes(MIN_BUDGET_BYTES * nodes)} or leave it unset to use "
        f"{DEFAULT_MEMORY_SHARE:g} of the server's memory"
    )
