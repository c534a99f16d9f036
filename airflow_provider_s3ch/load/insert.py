"""The ``prepare`` and ``insert`` phases: the staging table made ready, the insert run within the task's
memory cap (stepping down to smaller plans, :mod:`airflow_provider_s3ch.core.plan.shrink`), or started over
HTTP for the triggerer to follow (:class:`~.report.DeferLoad`); the staging table of a try that failed for
good dropped. Which statements run is :mod:`airflow_provider_s3ch.core.staging`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from airflow_provider_s3ch.core.deferral import DeferredLoad
from airflow_provider_s3ch.core.models import LoadPlan, SettingValue
from airflow_provider_s3ch.core.plan.shrink import STEPS, StepName, changed, smaller
from airflow_provider_s3ch.core.plan.shrink import step as shrink_step
from airflow_provider_s3ch.core.recovery import LoadSteps, QueryId
from airflow_provider_s3ch.core.server_models import ClusterNode
from airflow_provider_s3ch.core.sizes import fmt_bytes
from airflow_provider_s3ch.core.sql import RenderedSQL, S3Credentials, render_insert
from airflow_provider_s3ch.core.staging import abandon_statements, prepare_statements
from airflow_provider_s3ch.errors import ClickHouseUnavailableError, QueryMemoryLimitError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.http_insert import start_insert_http
from airflow_provider_s3ch.hooks.query_log import QueryLog, kill_query
from airflow_provider_s3ch.hooks.server import table_comment
from airflow_provider_s3ch.load import shards
from airflow_provider_s3ch.load.report import DeferLoad
from airflow_provider_s3ch.load.statements import run_statements, views_left

#: How long a failed load waits for its query to leave ``system.processes`` before it drops its staging table.
ABANDON_WAIT_SECONDS = 10.0

class Running(NamedTuple):
    """The queries a run waits for or runs now, and the nodes they run on (what ``on_kill`` kills)."""

    query_ids: list[str]
    nodes: Sequence[ClusterNode]


class PlannedInsert(NamedTuple):
    """An insert as the target phase planned it: the plan, its statement, the mode's steps and the query id."""

    plan: LoadPlan
    rendered: RenderedSQL
    steps: LoadSteps
    query_id: QueryId


class Fitted(NamedTuple):
    """The insert that fitted the memory cap: its plan and statement, and the attempts after a memory limit."""

    plan: LoadPlan
    rendered: RenderedSQL
    attempts: list[dict[str, Any]]


#: A plan with its predicted peak and its ``log_comment`` tag for a step (``plan``, ``halve``, …).
Tag = Callable[[LoadPlan, str], LoadPlan]


class Inserter:
    """One load's inserts on one connection; knows what runs now, for ``on_kill``.

    :param hook: the ClickHouse connection.
    :param credentials: the S3 credentials the statements carry (None: a public bucket).
    :param log: the task's logger.
    """

    def __init__(self, hook: ClickHouseHook, credentials: S3Credentials | None, log: logging.Logger) -> None:
        self.hook, self.queries, self.credentials, self.log = hook, QueryLog(hook), credentials, log
        #: The queries running now, and their nodes (what ``on_kill`` kills).
        self.running: Running | None = None
        #: The smaller plan an insert of this load needed after a memory limit (later chunks start from it).
        self.memory_step: StepName | None = None

    def kill(self) -> None:
        """Kill what runs now, on every node it runs on."""
        if self.running is not None:
            query_ids, nodes = self.running
            for query_id in query_ids:
                self.log.info("Killing query %s", query_id)
                kill_query(self.hook, query_id, nodes)

    # ------------------------------------------------------------------ prepare
    def prepare(self, steps: LoadSteps, query_id: QueryId) -> None:
        """Make the staging table ready (dropping an earlier try's leftover); on every shard for a Distributed
        target."""
        if steps.shards is not None:
            shards.prepare(self.hook, steps, query_id, self.log)
        elif steps.staging is not None:
            # A first try's staging table cannot be there (the name holds the try's stem): no read to say so.
            comment = table_comment(self.hook, steps.staging) if query_id.try_number > 1 else None
            swapped = comment is not None and steps.finalize == "exchange"  # an earlier try's swap may be unfinished
            leftovers = views_left(self.hook, steps.staging) if query_id.try_number > 1 and steps.views else []
            run_statements(self.hook, prepare_statements(
                steps, staging_exists=comment is not None, staging_comment=comment,
                target_comment=table_comment(self.hook, steps.target) if swapped else None, leftovers=leftovers),
                self.log)

    def abandon_if_idle(self, steps: LoadSteps, query_id: str, nodes: Sequence[ClusterNode]) -> None:
        """Drop the staging table of a try that failed once its query left ``system.processes``: the server
        reports an error a moment before it lets go of the query, so it waits up to
        :data:`ABANDON_WAIT_SECONDS` for that; a query still running then keeps its table for the next try
        (best effort: the load's own error goes on)."""
        if steps.staging is None:
            return
        try:
            deadline = time.monotonic() + ABANDON_WAIT_SECONDS
            while self.queries.running_queries([query_id], nodes):
                if time.monotonic() >= deadline:
                    self.log.warning("The failed load's query %s still runs after %.0f s: staging table %s is left "
                                     "to the next try, which drops it", query_id, ABANDON_WAIT_SECONDS, steps.staging)
                    return
                time.sleep(0.1)
            if steps.shards is not None:
                shards.abandon(self.hook, steps, self.log)
            else:
                run_statements(self.hook, abandon_statements(steps), self.log)
        except Exception as exc:  # noqa: BLE001 - best effort, the load's own error goes on
            self.log.warning("Could not drop staging table %s: %s", steps.staging, exc)

    # ------------------------------------------------------------------ insert
    def within_cap(self, planned: PlannedInsert, nodes: Sequence[ClusterNode], *, cores: int,
                   user: Mapping[str, SettingValue], tag: Tag) -> Fitted:
        """The insert; after the load's own memory limit (``memory_cap``), the same insert again with smaller
        plans while the target is untouched (a staging table), each attempt logged and recorded.
        ``max_memory_usage`` stays the cap throughout. A later chunk of the same load starts from the step
        that fitted, and so does a load whose last load at the same cap needed one (``plan.history``).

        :param user: the task's own settings (a step down keeps them).
        """
        plan, rendered, steps, query_id = planned
        first = plan.settings
        names = list(STEPS)
        attempts: list[dict[str, Any]] = []
        current = "plan"
        learned_step = (plan.history or {}).get("start_step")
        start = self.memory_step or (learned_step if learned_step in STEPS else None)
        if start is not None:  # an earlier chunk, or the last load at this cap, needed a smaller plan: start there
            current = start
            names = names[names.index(current) + 1:]
            plan = tag(plan.model_copy(update={"settings": smaller(first, current, cores=cores, user=user)}), current)
            rendered = render_insert(plan, self.credentials, target=steps.staging)
            if self.memory_step is None:
                self.log.info("Starting from step %r: the last load of this target and files at this memory cap "
                              "needed it (learned from system.query_log)", current)
        while True:
            try:
                self.insert(rendered, query_id, nodes, steps)
            except QueryMemoryLimitError as exc:
                why = str(exc).partition("DB::Exception: ")[2].partition(";")[0].strip()[:300] or str(exc)[:300]
                attempts.append({"step": current, "settings": changed(first, plan.settings) if current != "plan"
                                 else dict(plan.settings.values), "error": why})
                if steps.staging is None:
                    raise QueryMemoryLimitError(
                        f"{exc}; the load went straight into {steps.target} ({steps.reason}), so it is not tried "
                        "again with a smaller plan in this task: raise memory_cap, or load into a local MergeTree "
                        "table"
                    ) from exc
                while names:
                    name = names.pop(0)
                    smaller_settings = smaller(first, name, cores=cores, user=user)
                    if changed(plan.settings, smaller_settings):
                        break
                else:
                    tried = "; ".join(f"{a['step']}: {a['error']}" for a in attempts)
                    raise QueryMemoryLimitError(
                        f"the load does not fit memory_cap {fmt_bytes(plan.budget_bytes)} with any plan; tried "
                        f"{len(attempts)}: {tried}; raise memory_cap (the server's max_memory_usage for this load), "
                        "or load fewer or smaller files at once (max_files_per_load with skip_loaded=True)"
                    ) from exc
                self.log.warning("The load hit its memory limit (%s): loading again in this task with a smaller "
                                 "plan, step %r: %s", why, name, shrink_step(name).reason)
                plan = tag(plan.model_copy(update={"settings": smaller_settings}), name)
                rendered = render_insert(plan, self.credentials, target=steps.staging)
                for setting, value in changed(first, smaller_settings).items():
                    self.log.info("  %s = %s: %s", setting, value, smaller_settings.reasons.get(setting, ""))
                current = name
                continue
            if current != "plan":
                attempts.append({"step": current, "settings": changed(first, plan.settings), "error": None,
                                 **({"from_history": True} if current == learned_step and not attempts else {})})
                self.memory_step = current
            return Fitted(plan, rendered, attempts)

    def insert(self, rendered: RenderedSQL, query_id: QueryId, nodes: Sequence[ClusterNode], steps: LoadSteps) -> None:
        """One insert over the native protocol, into the staging table when there is one."""
        self.prepare(steps, query_id)
        self.running = Running([str(query_id)], nodes)
        try:
            self.hook.run_insert(rendered.sql, query_id=str(query_id), settings=rendered.settings, log=self.log)
        except ClickHouseUnavailableError:
            raise  # the server may still be running the load: leave the staging table to the retry
        except Exception:
            self.abandon_if_idle(steps, str(query_id), nodes)
            raise
        finally:
            self.running = None

    def start_deferred(self, rendered: RenderedSQL, query_id: QueryId, load: DeferredLoad) -> None:
        """Start the insert over HTTP (the server runs it without this process) and signal the deferral
        (:class:`DeferLoad`) with what the resumed task needs (``load``); returns only when the server finished
        it before it could be seen running (the load then goes on here, as one that did not defer)."""
        self.prepare(load.steps, query_id)
        self.running = Running([str(query_id)], load.insert_nodes)
        try:
            finished = start_insert_http(self.hook, rendered.sql, query_id=str(query_id),
                                         settings=rendered.settings, log=self.log)
        except ClickHouseUnavailableError:
            raise  # the server may still run the load: the staging table is the retry's
        except Exception:
            self.abandon_if_idle(load.steps, str(query_id), load.insert_nodes)
            raise
        finally:
            self.running = None
        if finished:
            self.log.info("The server finished query %s before it was seen running: finishing the load here",
                          query_id)
            return
        raise DeferLoad(kind="insert", query_ids=[str(query_id)],
                        nodes=[n.model_dump(mode="json") for n in load.fan_out or load.insert_nodes],
                        load=load.model_dump(mode="json"))
