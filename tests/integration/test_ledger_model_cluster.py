"""The file ledger against its model on the three-node local cluster: the histories of ``test_ledger_model``
loaded into a Distributed table over MergeTree tables on three shards, with node kills.

The target is a Distributed table (rows spread over the shards by ``rand()``); each load is staged on every shard
and published shard by shard, and the ledger lives on the first shard's node (node 0, also the connection's, the
initiator). Every rule of the one-node machine runs (new files, overwrites, earlier versions put back, deletes,
loads and loads from events, the worker SIGKILLed at a random statement and retried, a killed load's claims taken
over once its heartbeat aged) under every option set of the one-node machine that loads (``append`` whole or in
chunks, ``replace_partitions`` with its rebuild on every shard; each ``on_changed``), through ``s3Cluster`` or through
the Distributed table;
and one more rule: **a node is SIGKILLed** (node 0, the initiator and the ledger's node; or node 1 or 2) at a
random statement of a load (just before it is sent, or a few milliseconds after), restarted (a restarted node
starts with an empty ``system.query_log``), and the load retried.

The invariants are the one-node machine's, over all shards: the table per partition (``count()`` and
``sum(cityHash64(...))`` through the Distributed table) equals ClickHouse's own read of the versions the model
holds; the ledger holds one ``loaded`` row per key, of the model's version, and no claim or ``pending`` row; no
staging table is left on any node.

``S3CH_CLUSTER_HISTORIES`` sets the number of histories (12 by default; ``make ledger-histories-cluster``
runs 120) and ``S3CH_CLUSTER_HISTORIES_REPORT`` a file the run's counts go to.
"""

from __future__ import annotations

import copy
import uuid
from collections import Counter
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from airflow_provider_s3ch.core.recovery import STAGING_PREFIX
from airflow_provider_s3ch.local import LocalStack
from tests.integration import test_ledger_model as one_node
from tests.integration.support import counting, kill_node, module_counts

pytestmark = pytest.mark.integration

CONNS = {"clickhouse_conn_id": "clickhouse_cluster", "aws_conn_id": "aws_cluster"}
#: The option sets: every one that loads on one node (``append`` and ``replace_partitions``, whose rebuild of the
#: partitions earlier files share is made on every shard).
OPTION_SETS = one_node.OPTION_SETS
STATS = one_node.STATS
#: What the refusals the model predicts say (any other error of a retry is a node still starting).
REFUSALS = ("cannot run with", "changed since they were loaded", "cannot be read again as they were loaded")


class ClusterLedgerHistories(one_node.LedgerHistories):
    """The one-node machine on a Distributed table, with node kills."""

    stack: ClassVar[LocalStack]
    strategy = "single"
    nodes_killed = 0

    def create_target(self) -> None:
        name = self.table.split(".", 1)[1]
        self.stack.create_distributed_table(name, "CREATE TABLE {table} (" + one_node.STRUCTURE + ") ENGINE = "
                                            "MergeTree PARTITION BY p ORDER BY (file, id)")

    def teardown(self) -> None:
        self.stack.execute_on_all(f"DROP TABLE IF EXISTS {self.table} SYNC")
        self.stack.execute_on_all(f"DROP TABLE IF EXISTS {self.table}_local SYNC")

    def staging_left(self) -> list[str]:
        return [f"node {node.index}: {name}" for node in self.stack.nodes for (name,) in self.stack.clickhouse_client(
            node.index).execute("SELECT name FROM system.tables WHERE startsWith(name, %(p)s)",
                                {"p": STAGING_PREFIX})]

    @initialize(files=st.lists(one_node.LedgerHistories.ROWS, min_size=1, max_size=3),
                strategy=st.sampled_from(["single", "distributed"]), node=st.sampled_from([0, 0, 1, 2]),
                die_at=st.integers(1, 30), in_flight_ms=st.sampled_from([0, 0, 5, 30]))
    def first_files(self, files: list[list[tuple[int, int]]], strategy: str, node: int, die_at: int,
                    in_flight_ms: int) -> None:
        """The first files, and their first load through ``strategy`` (the Distributed table with ``s3()``, or
        ``s3Cluster`` on every node) with a node killed at its ``die_at``-th statement: every history has one."""
        super().first_files(files)
        self.strategy = strategy
        STATS[f"histories through strategy={strategy}"] += 1
        self.node_killed(node, die_at, in_flight_ms, self.model.run(*self.options))

    def kwargs(self, events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {**super().kwargs(events), **CONNS, "strategy": self.strategy}

    NODE_KILL = {"node": st.sampled_from([0, 0, 1, 2]), "die_at": st.integers(1, 60),
                 "in_flight_ms": st.sampled_from([0, 0, 5, 30])}

    @rule(kill=st.one_of(st.none(), st.tuples(*NODE_KILL.values())))
    def load(self, kill: tuple[int, int, int] | None) -> None:
        """The one-node machine's plain run; here most runs that load meet a node kill."""
        if kill is None or not self.loads_something():
            super().load()
        else:
            self.node_killed(*kill, self.model.run(*self.options))

    def loads_something(self, named: set[int] | None = None) -> bool:
        """Whether a run now loads files (a kill then meets the statements of a load, not of a run that found
        nothing)."""
        return copy.deepcopy(self.model).run(*self.options, named=named) == "loaded"

    @precondition(loads_something)
    @rule(**NODE_KILL)
    def load_with_a_node_killed_and_retried(self, node: int, die_at: int, in_flight_ms: int) -> None:
        """A load whose ``die_at``-th statement meets node ``node`` SIGKILLed; the node restarted; the retry (a
        third try where the second met a node still starting) does what one run must."""
        self.node_killed(node, die_at, in_flight_ms, self.model.run(*self.options))

    @precondition(lambda self: one_node.AIRFLOW_3 and self.notifications)
    @rule(data=st.data(), **NODE_KILL)
    def load_from_events_with_a_node_killed_and_retried(self, data: st.DataObject, node: int, die_at: int,
                                                        in_flight_ms: int) -> None:
        events, files = self.draw_events(data)
        STATS["run from events, a node killed"] += 1
        self.node_killed(node, die_at, in_flight_ms, self.model.run(*self.options, named=files), events)

    def node_killed(self, node: int, die_at: int, in_flight_ms: int, must: str,
                    events: list[dict[str, Any]] | None = None) -> None:
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        with counting(die_at, in_flight_ms, act=lambda: kill_node(self.stack, node)) as sent:
            first = self.outcome(run_id, 1, must, events)
        self.stack.restart_node(node)
        if sent[0] < die_at:  # killed after its last statement: the load ended as it would have
            STATS["node kill points after the load's last statement"] += 1
            self.expect(run_id, 1, must, events, outcome=first)
            return
        STATS["node kills: " + ("node 0 (the initiator and the ledger's)" if node == 0 else "node 1 or 2")] += 1
        if not self.nodes_killed:
            STATS["histories with a node kill"] += 1
        self.nodes_killed += 1
        if first == "done" and must in ("loaded", "nothing"):  # the node had nothing left to do: not retried
            STATS["node kills the load outlived"] += 1
            return
        second = self.outcome(run_id, 2, must, events)
        if second != "done" and not any(refusal in second for refusal in REFUSALS):  # a node still starting
            STATS["retries that needed a third try"] += 1
            second = self.outcome(run_id, 3, must, events)
        self.expect(run_id, 2, must, events, outcome=second)


@pytest.fixture(scope="module")
def bucket(cluster_stack: LocalStack) -> str:
    cluster_stack.create_bucket(one_node.BUCKET)
    return one_node.BUCKET


#: The histories' counts, printed (and written to ``S3CH_CLUSTER_HISTORIES_REPORT``) after the module.
stats = module_counts(STATS, "cluster ledger histories", "S3CH_CLUSTER_HISTORIES_REPORT")


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: "/".join(str(x) for x in o))
def test_the_ledger_on_a_cluster_matches_the_model_after_any_history_with_node_kills(
    cluster_stack: LocalStack, bucket: str, stats: Counter[str], options: tuple[str, str, int | None],
) -> None:
    """``S3CH_CLUSTER_HISTORIES`` histories in all (12 by default), shared among the option sets."""
    ClusterLedgerHistories.stack, ClusterLedgerHistories.options = cluster_stack, options
    one_node.run_histories(ClusterLedgerHistories, "S3CH_CLUSTER_HISTORIES", 12, len(OPTION_SETS))
