"""Goldens: what the load path sends to ClickHouse and returns, recorded on the real local stack.

Each test runs one load (single-node append; each mode through a staging table; a dry run; a retry that
attaches to its first try; a memory step-down; the file ledger in chunks; a deferred load; a distributed
load) and compares, with ``tests/integration/goldens/<name>.json``:

- ``xcom``: what ``execute`` (or, deferred, ``execute_complete``) returned;
- ``statements``: what the provider sent to ClickHouse, in order, as the servers logged them:
  ``system.query_log`` on every node, initial queries (``QueryStart`` or ``ExceptionBeforeStart``) between
  the load's start and end, from the provider's native clients (``client_name`` ``airflow-provider-s3ch``)
  or over HTTP (a deferred load's insert: its ``client_name`` and ``http_user_agent`` are empty);
- ``trigger``: for the deferred load, ``LoadTrigger.serialize()``;
- ``table``: the target's rows per partition afterwards, as the server counts them.

What varies from run to run is normalised (:class:`Placeholders`, :func:`statement_lines`):

- names: the unique table and database (``<table>``, ``<db>``), the query id stem (``<stem>``; a chunk's
  unit id is ``<stem>`` and its number), other query ids (``<hexN>``), ports (``<s3>``, ``<tcpN>``,
  ``<httpN>``), the history tag's key (``<history-key>``), uuids (secondary query ids), timestamps, the
  sample's schema sent from its footer (``<footer-schema>``);
- figures: timings and memory peaks (``<varies>``), and the figures a staging table's mark carries
  (``<figures>``); with no ``memory_cap``, the budget (``<budget>``, and the sizes computed from it in the
  reasons): half of the server's memory, which chdb-core derives from the machine's available memory of the
  moment; the engine's words after "Query memory limit exceeded"; in the distributed load each node's rows
  and bytes (which node read which file is the engine's choice);
- order and repeats: a distributed load's statements are kept node by node (its shards' steps run at once,
  one thread a node), its shards' partition moves once, as ``<its partitions>``; polling loops (``SYSTEM FLUSH
  LOGS`` and ``system.query_log`` reads,
  ``system.processes`` polls, the trigger's looks) repeat their reads a variable number of times, so
  consecutive repeats of any run of one to three statements are collapsed into one; the deferred insert
  is logged once the server parsed it, so a ``system.processes`` poll may come before or after it; a ledger
  load's heartbeat writes its first beat before its claims (kept) and the next ones from a thread beside the
  load every few seconds, wherever the load is by then (left out).

The recorded plans follow the server's cores: on a server with other cores the comparisons are skipped,
saying so. The loads read at most two Parquet files per node: from three on (more than the cores) the plan
adds reading streams when the listing's quickest S3 call took 15 ms or more, which a busy machine can make.

``S3CH_RECORD_GOLDENS=1`` writes the goldens instead of comparing them: record from the code the goldens
describe, e.g. a worktree of it with this file copied in (pytest puts its rootdir first on ``sys.path``, so
``PYTHONPATH`` alone does not choose the code; the module prints where it imported the provider from).
``deferred_payload_v1.json`` (a deferred load's trigger arguments as the recorded code serialized them) is
written only when missing: it stands for tasks deferred before an upgrade, which
:func:`test_a_task_deferred_by_the_recorded_code_completes_after_an_upgrade` resumes with this code.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import airflow_provider_s3ch
from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX, QueryId
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL, SampleDataset, posts_ddl, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from airflow_provider_s3ch.triggers.load import LoadTrigger
from tests.integration.support import SAMPLE_BUCKET, count, fake_context
from tests.integration.test_deferrable import _defer, _fire, _run
from tests.integration.test_ledger import STRUCTURE as LEDGER_STRUCTURE
from tests.integration.test_ledger import Files, bucket

pytestmark = pytest.mark.integration

__all__ = ["bucket"]  # the ledger tests' bucket fixture

GOLDENS = Path(__file__).with_name("goldens")
RECORD = os.environ.get("S3CH_RECORD_GOLDENS") == "1"
PAYLOAD_V1 = GOLDENS / "deferred_payload_v1.json"

#: What the provider's native clients call themselves (hooks/clickhouse.py; the server prefixes "ClickHouse ").
CLIENT_NAME = "airflow-provider-s3ch"

#: XCom and trigger fields whose values are timings or memory figures of the moment.
VARIES = frozenset({
    "duration_ms", "wall_ms", "phases_ms", "run_ms", "memory_usage", "memory_vs_predicted", "rows_per_second",
    "admission_wait_ms", "started_at", "deadline", "elapsed", "query_duration_ms",
    # a later load's scale is an earlier load's measured / predicted peak: a figure of the moment too
    "memory_scale", "predicted_memory_usage",
    # a ledger load's freshness: seconds from the files' LastModified to the moment
    "lag_s", "lag_left_s", "p50_s", "p95_s", "max_s",
})
VARIES_TEXT = "<varies>"

#: Seconds each row of a slowed table sleeps in its MATERIALIZED column (deferred loads: ~1.5 s per load).
SLEEP = 0.0005

#: The server fact the recorded plans follow (its cores): goldens are compared only on a server like the recording's.
#: (Its memory varies run to run: chdb-core derives it from the machine's available memory; see Placeholders.)
FACTS_SQL = "SELECT value FROM system.settings WHERE name = 'max_threads'"

_STATEMENTS_SQL = (
    "SELECT toUnixTimestamp64Micro(event_time_microseconds) AS t, toString(type), toString(interface), query_id, "
    "query FROM system.query_log "
    "WHERE toUnixTimestamp64Micro(event_time_microseconds) BETWEEN %(since)s AND %(until)s AND is_initial_query "
    "AND type IN ('QueryStart', 'ExceptionBeforeStart') "
    "AND (endsWith(client_name, %(client)s) OR interface = 'HTTP') ORDER BY t"
)


# ---------------------------------------------------------------------- normalising


class Placeholders:
    """Run-varying text and values -> placeholders, with the way back (to fill a recorded payload in)."""

    _UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
    _DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)?")
    _HISTORY_KEY = re.compile(r"(?<=s3ch/1 )[0-9a-f]{16}\b")
    #: The figures a staging table's mark carries (timings among them): a statement's last literal.
    _FILLED_FIGURES = re.compile(r"(; filled by \S+: )\{.*\}'$")
    _QUERY_STEM = re.compile(rf"(?<=s3ch-)[0-9a-f]{{8,}}(?=-try)|(?<={STAGING_PREFIX})[0-9a-f]{{8,}}")
    _SIZE = r"[0-9.]+ [KMGT]?i?B"
    #: Where the default memory budget (no memory_cap: half the server's memory, which chdb-core derives from
    #: the machine's available memory of the moment) shows in text.
    _BUDGET_TEXT = (
        (re.compile(r"max_memory_usage = \d+"), "max_memory_usage = <budget>"),
        (re.compile(r'"cap":\d+'), '"cap":<budget>'),
        (re.compile(rf"of the server's {_SIZE} \(([^)]*)\) = {_SIZE}"),
         r"of the server's <server-memory> (\1) = <budget-size>"),
        (re.compile(rf"the memory formula {_SIZE} / \((\d+) x (\d+) threads\) = {_SIZE}"),
         r"the memory formula <budget-size> / (\1 x \2 threads) = <size>"),
    )

    def __init__(self, *stacks: LocalStack) -> None:
        self.literals: dict[str, str] = {}
        #: The load ran with the default memory budget (no memory_cap): its figures vary run to run.
        self.default_budget = False
        for stack in stacks:
            self.add(str(stack.s3_port), "<s3>")
            for node in stack.nodes:
                self.add(str(node.tcp_port), f"<tcp{node.index}>")
                self.add(str(node.http_port), f"<http{node.index}>")

    def add(self, literal: str, placeholder: str) -> None:
        self.literals.setdefault(literal, placeholder)

    def table(self, name: str, placeholder: str = "<table>") -> None:
        """A unique table (or database) name, ``db.name`` or ``name``: its name part."""
        self.add(name.rpartition(".")[2], placeholder)

    def stem(self, query_id: QueryId | str, placeholder: str = "<stem>") -> None:
        self.add(QueryId.parse(str(query_id)).stem if isinstance(query_id, str) else query_id.stem, placeholder)

    def learn(self, value: Any) -> None:
        """Take from a result (an XCom, trigger arguments) whether its plan had the default memory budget, and
        its budget (to fill a recorded payload in)."""
        if isinstance(value, dict):
            if "budget_bytes" in value and "no memory_cap given" in json.dumps(value, default=str):
                self.default_budget = True
                self.add(str(value["budget_bytes"]), "<budget>")
            for v in value.values():
                self.learn(v)
        elif isinstance(value, list):
            for v in value:
                self.learn(v)

    #: A learned scale of the peak memory in text (what ``memory_scale`` says).
    _SCALE = re.compile(r"(?<=x )[0-9]+\.[0-9]{2}(?=:? \(?measured / predicted)")

    #: The sample's schema sent as a literal (``DESCRIBE TABLE format(Parquet, '…')``); its bytes are checked against
    #: the engine in test_schema_footer.py.
    _FOOTER_SCHEMA = re.compile(r"(DESCRIBE TABLE format\(`[A-Za-z]+`, )'(?:[^'\\]|\\.)*'")

    def text(self, value: str) -> str:
        value = self._FOOTER_SCHEMA.sub(r"\1'<footer-schema>'", value)
        value = self._FILLED_FIGURES.sub(r"\1<figures>'", value)
        value = self._SCALE.sub("<scale>", value)
        if self.default_budget:
            for pattern, replacement in self._BUDGET_TEXT:
                value = pattern.sub(replacement, value)
        for literal in sorted(self.literals, key=len, reverse=True):
            if literal.isdigit():  # a port or a figure: not inside a longer number
                value = re.sub(rf"(?<![0-9]){literal}(?![0-9])", self.literals[literal], value)
            else:
                value = value.replace(literal, self.literals[literal])
        value = self._QUERY_STEM.sub(lambda m: self._ordinal(m.group(0), "hex"), value)
        value = self._HISTORY_KEY.sub(lambda m: self.literals.setdefault(m.group(0), "<history-key>"), value)
        value = self._UUID.sub("<uuid>", value)
        return self._DATETIME.sub("<datetime>", value)

    def _ordinal(self, literal: str, kind: str) -> str:
        if literal not in self.literals:
            self.literals[literal] = f"<{kind}{sum(p.startswith(f'<{kind}') for p in self.literals.values()) + 1}>"
        return self.literals[literal]

    def value(self, value: Any, key: str | None = None) -> Any:
        """A JSON value (an XCom, trigger arguments) with its run-varying parts replaced."""
        if key in VARIES and value is not None:
            return VARIES_TEXT
        if key in ("budget_bytes", "max_memory_usage") and self.default_budget and isinstance(value, int):
            return "<budget>"
        if key in ("port", "http_port") and isinstance(value, int):
            return self.text(str(value))
        if key == "error" and isinstance(value, str) and "memory limit" in value:
            # The engine's words after the first clause say where the allocation failed: they vary.
            return value.partition(":")[0]
        if isinstance(value, dict):
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def fill(self, template: Any, current: Any = None) -> Any:
        """A normalised payload made concrete again: each placeholder takes the literal this run replaced with
        it (a number where the literal is one); a placeholder no literal stands for (a timing, a timestamp, a
        uuid) takes this run's value at the same place, if it has one, else now."""
        back = {p: lit for lit, p in self.literals.items()}
        if isinstance(template, dict):
            cur = current if isinstance(current, dict) else {}
            return {k: self.fill(v, cur.get(k)) for k, v in template.items()}
        if isinstance(template, list):
            cur = current if isinstance(current, list) else []
            return [self.fill(v, cur[i] if i < len(cur) else None) for i, v in enumerate(template)]
        if not isinstance(template, str):
            return template
        if template in back:
            return int(back[template]) if back[template].isdigit() else back[template]
        if re.fullmatch(r"<[a-z][a-z0-9-]*>", template):
            if current is not None:
                return current
            if template == "<datetime>":
                return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            return str(uuid.uuid4()) if template == "<uuid>" else time.time()
        return re.sub(r"<[a-z][a-z0-9-]*>", lambda m: back.get(m.group(0), m.group(0)), template)


#: The text of a heartbeat's write (the first is the load's; the thread's later ones are left out).
HEARTBEAT_WRITE = f"{LEDGER_NAME}_heartbeat` (`load_id`, `window_s`) VALUES"


def collapse(statements: list[str]) -> list[str]:
    """Consecutive repeats of any run of 1 to 3 statements, as one (polling loops repeat their reads a
    variable number of times)."""
    out = list(statements)
    changed = True
    while changed:
        changed = False
        for width in (1, 2, 3):
            i = 0
            while i + 2 * width <= len(out):
                if out[i:i + width] == out[i + width:i + 2 * width]:
                    del out[i + width:i + 2 * width]
                    changed = True
                else:
                    i += 1
    return out


# ---------------------------------------------------------------------- what the servers logged


def server_time(stack: LocalStack) -> int:
    return int(stack.clickhouse_client(0).execute("SELECT toUnixTimestamp64Micro(now64(6))")[0][0])


def server_facts(stack: LocalStack) -> dict[str, Any]:
    (threads,), = stack.clickhouse_client(0).execute(FACTS_SQL)
    return {"max_threads": str(threads), "nodes": len(stack.nodes)}


class Statements:
    """What the provider sent to the stack's nodes between :meth:`start` and :meth:`read`."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.since = 0

    def start(self) -> Statements:
        self.since = server_time(self.stack)
        return self

    def read(self) -> list[dict[str, Any]]:
        """Every node's entries, in the order they started: node, type, interface, query id, query."""
        until = server_time(self.stack)
        rows = []
        for node in self.stack.nodes:
            client = self.stack.clickhouse_client(node.index)
            client.execute("SYSTEM FLUSH LOGS")
            for t, kind, interface, query_id, query in client.execute(
                _STATEMENTS_SQL, {"since": self.since, "until": until, "client": CLIENT_NAME}
            ):
                rows.append({"t": t, "node": node.index, "type": kind, "interface": interface, "query_id": query_id,
                             "query": query})
        rows.sort(key=lambda r: (r["t"], r["node"]))
        return rows


def statement_lines(rows: list[dict[str, Any]], ph: Placeholders, *, nodes: int) -> list[str]:
    """The statements as text, normalised: ``[n<node>] [<interface>] [<type>] <query>``, whitespace folded."""
    lines = []
    for r in rows:
        tags = [f"n{r['node']}"] if nodes > 1 else []
        if r["interface"] != "TCP":
            tags.append(r["interface"])
        if r["type"] != "QueryStart":
            tags.append(r["type"])
        query = " ".join(r["query"].split())
        if r["interface"] == "HTTP":
            query = f"query_id={r['query_id']}: {query}"
        lines.append(ph.text(" ".join([*(f"[{t}]" for t in tags), query])))
    beats = [i for i, line in enumerate(lines) if HEARTBEAT_WRITE in line]
    lines = collapse([line for i, line in enumerate(lines) if i not in beats[1:]])
    # The server logs the HTTP insert once it parsed it, while the task already polls system.processes for it
    # (every 0.1 s): on a busy machine a poll can come first. A poll both before and after it is the same poll.
    i = 1
    while i < len(lines) - 1:
        if lines[i].startswith("[HTTP]") and lines[i - 1] == lines[i + 1]:
            del lines[i - 1]
        else:
            i += 1
    return collapse(lines)


def assert_no_secret(stack: LocalStack, *values: Any) -> None:
    text = json.dumps(values, default=str)
    for secret in (stack.s3_secret_key, stack.password):
        assert secret not in text


def partitions(stack: LocalStack, table: str, node: int = 0) -> dict[str, int]:
    rows = stack.clickhouse_client(node).execute(
        f"SELECT toString(_partition_id), count() FROM {table} GROUP BY 1 ORDER BY 1")
    return {str(p): int(n) for p, n in rows}


# ---------------------------------------------------------------------- recording and comparing


def golden(name: str, stack: LocalStack, doc: dict[str, Any]) -> None:
    """Write the golden (``S3CH_RECORD_GOLDENS=1``) or compare with it."""
    path = GOLDENS / f"{name}.json"
    doc = {"golden": name, "server": server_facts(stack), **doc}
    text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
    if RECORD:
        GOLDENS.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no golden {path}: record it with S3CH_RECORD_GOLDENS=1 from the code it describes"
    recorded = path.read_text()
    if json.loads(recorded)["server"] != doc["server"]:
        pytest.skip(f"{path.name} was recorded on a server with {json.loads(recorded)['server']}; this one has "
                    f"{doc['server']} (the plan follows them): re-record it there from the recorded code")
    if text != recorded:
        diff = "\n".join(difflib.unified_diff(recorded.splitlines(), text.splitlines(), f"golden {path.name}",
                                              "this run", lineterm="", n=2))
        pytest.fail(f"the load differs from its golden {path.name}:\n{diff}", pytrace=False)


def loaded(op: S3ToClickHouseOperator, context: dict[str, Any], stack: LocalStack, ph: Placeholders,
           run: Any = None) -> tuple[dict[str, Any], list[str]]:
    """Run ``run()`` (default: ``op.execute(context)``) and return its XCom and statements, normalised."""
    ph.stem(op.query_id(context))
    log = Statements(stack).start()
    result = run() if run is not None else op.execute(context)
    rows = log.read()
    assert_no_secret(stack, result, rows)
    ph.learn(result)
    return ph.value(result), statement_lines(rows, ph, nodes=len(stack.nodes))


# ---------------------------------------------------------------------- data and targets


@pytest.fixture(scope="module", autouse=True)
def _imported_from() -> None:
    """Say which code the goldens ran against (the base checkout when recording)."""
    print(f"\ngoldens: airflow_provider_s3ch from {Path(airflow_provider_s3ch.__file__).parent}")


@pytest.fixture(scope="module")
def months(stack: LocalStack) -> SampleDataset:
    """3,000 posts in two monthly Parquet files (2008-07, 2008-08).

    No more Parquet files per node than the server's two cores: from three on, the plan adds reading streams
    when the listing's quickest S3 call took 15 ms or more, which moto on a busy machine sometimes does."""
    return write_posts(stack.s3_client(), SAMPLE_BUCKET, rows=3_000, months=2, prefix="goldens/months/")


@pytest.fixture(scope="module")
def big_month(stack: LocalStack) -> SampleDataset:
    """60,000 posts in one Parquet file of one row group: at memory_cap 100 MiB the first plan (~150 MiB) and
    ``halve`` (~130 MiB) hit the limit, ``one_thread`` (~70 MiB) fits (measured on the local stack)."""
    return write_posts(stack.s3_client(), SAMPLE_BUCKET, rows=60_000, months=1, prefix="goldens/big/")


@pytest.fixture(scope="module")
def cluster_months(cluster_stack: LocalStack) -> SampleDataset:
    """3,000 posts in six monthly files: more files than the cluster's three nodes, so ``auto`` goes distributed
    (two files per node: no more than the cores, see ``months``)."""
    return write_posts(cluster_stack.s3_client(), SAMPLE_BUCKET, rows=3_000, months=6, prefix="goldens/cluster/")


@pytest.fixture(scope="module", autouse=True)
def _query_log(stack: LocalStack) -> None:
    """The server's ``system.query_log`` exists before the first recorded load (a fresh server makes it at its
    first flush): the history read is then the same statement on a fresh stack as in a long session."""
    stack.clickhouse_client().execute("SYSTEM FLUSH LOGS")


@pytest.fixture
def ph(stack: LocalStack) -> Placeholders:
    return Placeholders(stack)


def new_table(stack: LocalStack, ph: Placeholders, prefix: str = "gold") -> str:
    name = f"default.{prefix}_{uuid.uuid4().hex[:10]}"
    stack.clickhouse_client().execute(posts_ddl(name))
    ph.table(name)
    return name


def slowed_table(stack: LocalStack, ph: Placeholders) -> str:
    """A posts table whose inserts sleep SLEEP seconds per row (a MATERIALIZED column the files lack)."""
    name = new_table(stack, ph, "slow")
    stack.clickhouse_client().execute(f"ALTER TABLE {name} ADD COLUMN slow UInt8 MATERIALIZED sleepEachRow({SLEEP})")
    return name


def prefilled_table(stack: LocalStack, ph: Placeholders) -> str:
    """A posts table holding a row in 2008-07 (a month the files hold) and one in 2006-01 (one they do not)."""
    name = new_table(stack, ph)
    stack.clickhouse_client().execute(
        f"INSERT INTO {name} (Id, PostTypeId, CreationDate) VALUES "
        "(900001, 'Question', '2008-07-15 00:00:00'), (900002, 'Answer', '2006-01-15 00:00:00')")
    return name


# ---------------------------------------------------------------------- the loads


def test_single_node_append(stack: LocalStack, months: SampleDataset, ph: Placeholders) -> None:
    table = new_table(stack, ph)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=months.s3_uri, table=table)
    xcom, statements = loaded(op, fake_context(), stack, ph)
    golden("single_append", stack, {"xcom": xcom, "statements": statements, "table": partitions(stack, table)})


@pytest.mark.parametrize("mode", ["append", "replace_partitions", "overwrite"])
def test_each_mode_through_staging(stack: LocalStack, months: SampleDataset, ph: Placeholders, mode: str) -> None:
    table = prefilled_table(stack, ph)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=months.s3_uri, table=table, mode=mode)
    xcom, statements = loaded(op, fake_context(), stack, ph)
    golden(f"mode_{mode}", stack, {"xcom": xcom, "statements": statements, "table": partitions(stack, table)})


def test_dry_run(stack: LocalStack, months: SampleDataset, ph: Placeholders) -> None:
    table = new_table(stack, ph)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=months.s3_uri, table=table, dry_run=True)
    xcom, statements = loaded(op, fake_context(), stack, ph)
    assert count(stack, table) == 0
    golden("dry_run", stack, {"xcom": xcom, "statements": statements, "table": partitions(stack, table)})


def test_retry_attaches_to_the_first_try(stack: LocalStack, months: SampleDataset, ph: Placeholders) -> None:
    """Try 1 loaded; Airflow never heard of it (a lost worker): try 2 of the same task instance takes its figures."""
    table = new_table(stack, ph)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    first, first_statements = loaded(S3ToClickHouseOperator(task_id="load", s3_uri=months.s3_uri, table=table),
                                     fake_context("load", 1, run_id), stack, ph)
    xcom, statements = loaded(S3ToClickHouseOperator(task_id="load", s3_uri=months.s3_uri, table=table),
                              fake_context("load", 2, run_id), stack, ph)
    assert xcom["attached_to"] == first["query_id"] and count(stack, table) == months.rows
    golden("retry_attach", stack, {"try1": {"xcom": first, "statements": first_statements},
                                   "xcom": xcom, "statements": statements, "table": partitions(stack, table)})


def test_memory_step_down(stack: LocalStack, big_month: SampleDataset, ph: Placeholders) -> None:
    table = new_table(stack, ph)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=big_month.s3_uri, table=table, memory_cap="100MiB")
    xcom, statements = loaded(op, fake_context(), stack, ph)
    assert [a["step"] for a in xcom["memory_attempts"]] == ["plan", "halve", "one_thread"], xcom["memory_attempts"]
    golden("memory_step_down", stack, {"xcom": xcom, "statements": statements, "table": partitions(stack, table)})


@pytest.fixture
def ledger_files(stack: LocalStack, bucket: str) -> Iterator[Files]:
    """Five CSV files and a target in a database of their own (so its default ledger is created by the load)."""
    db = f"gold_{uuid.uuid4().hex[:10]}"
    client = stack.clickhouse_client()
    client.execute(f"CREATE DATABASE {db}")
    client.execute(f"CREATE TABLE {db}.led ({LEDGER_STRUCTURE}) ENGINE = MergeTree PARTITION BY file % 3 ORDER BY id")
    files = Files(stack, f"goldens/ledger/{db}/", f"{db}.led")
    files.put(*range(5))
    yield files
    client.execute(f"DROP DATABASE {db} SYNC")


def test_ledger_with_chunks(stack: LocalStack, ledger_files: Files, ph: Placeholders) -> None:
    f = ledger_files
    ph.add(f.table.partition(".")[0], "<db>")
    op = f.operator(max_files_per_load=2)
    xcom, statements = loaded(op, fake_context(), stack, ph)
    assert xcom["written_rows"] == 5 * f.rows and len(xcom["chunks"]) == 3
    ledger = [list(r) for r in stack.clickhouse_client().execute(
        f"SELECT key, chunk, toString(state) FROM {f.table.partition('.')[0]}._s3ch_ledger FINAL ORDER BY key")]
    golden("ledger_chunks", stack, {"xcom": xcom, "statements": statements, "table": partitions(stack, f.table),
                                    "ledger": ph.value(ledger)})


def test_deferred(stack: LocalStack, months: SampleDataset, ph: Placeholders) -> None:
    table = slowed_table(stack, ph)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=months.s3_uri, table=table, deferrable=True, poll_interval=0.5)
    context = fake_context()
    triggers: list[LoadTrigger] = []
    xcom, statements = loaded(op, context, stack, ph, run=lambda: _run(op, context, triggers))
    ((trigger,),) = [triggers]  # it deferred once, to follow its insert
    classpath, kwargs = trigger.serialize()
    assert_no_secret(stack, kwargs)
    assert count(stack, table) == months.rows
    golden("deferred", stack, {"xcom": xcom, "statements": statements, "table": partitions(stack, table),
                               "trigger": {"classpath": classpath, "kwargs": ph.value(kwargs)}})
    if RECORD and not PAYLOAD_V1.exists():  # the old code's payload: kept, never re-recorded over
        PAYLOAD_V1.write_text(json.dumps({"classpath": classpath, "kwargs": ph.value(kwargs)}, indent=2,
                                         sort_keys=True) + "\n")


def test_distributed(cluster_stack: LocalStack, cluster_months: SampleDataset) -> None:
    ph = Placeholders(cluster_stack)
    dist, local = cluster_stack.create_distributed_table(f"gold_{uuid.uuid4().hex[:10]}",
                                                         POSTS_DDL.replace("{engine}", "MergeTree"))
    ph.table(local, "<table>_local")
    ph.table(dist)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=cluster_months.s3_uri, table=dist,
                                clickhouse_conn_id="clickhouse_cluster", aws_conn_id="aws_cluster")
    for node in cluster_stack.nodes:  # a node's system.query_log exists from its first flush (a fresh node: none)
        cluster_stack.clickhouse_client(node.index).execute("SYSTEM FLUSH LOGS")
    xcom, statements = loaded(op, fake_context(), cluster_stack, ph)
    assert xcom["strategy"] == "distributed" and count(cluster_stack, dist) == cluster_months.rows
    for node in xcom["nodes"]:  # which node read which file is the engine's choice
        node.update(dict.fromkeys(("read_rows", "read_bytes", "written_rows", "written_bytes"), VARIES_TEXT))
    golden("distributed", cluster_stack, {"xcom": xcom, "statements": per_node(statements),
                                          "table": partitions(cluster_stack, dist)})


#: A shard's partition moves: which partitions a node holds is the engine's choice (which node read which file).
_MOVES = re.compile(r"MOVE PARTITION ID '[^']*' TO TABLE ([^,\s]+)(, MOVE PARTITION ID '[^']*' TO TABLE [^,\s]+)*")


def per_node(lines: list[str]) -> dict[str, list[str]]:
    """A distributed load's statements node by node, each node's in the order it got them: the shards' steps run
    at once, one thread a node, so the order between nodes is the machine's. A shard moves the partitions it
    holds, and which it holds (none, on a busy machine) is the engine's choice (which node read which file): its
    moves are under ``"moves"``, once, as ``<its partitions>``."""
    out: dict[str, list[str]] = {"moves": []}
    for line in lines:
        node, _, statement = line.partition(" ")
        moves = _MOVES.sub(r"MOVE PARTITION ID <its partitions> TO TABLE \1", statement)
        if moves != statement:
            out["moves"] = [moves]
        else:
            out.setdefault(node.strip("[]"), []).append(statement)
    return out


# ---------------------------------------------------------------------- a task deferred before an upgrade


def test_a_task_deferred_by_the_recorded_code_completes_after_an_upgrade(
    stack: LocalStack, months: SampleDataset, ph: Placeholders
) -> None:
    """A task deferred by the recorded code (its trigger's arguments in the triggerer's table, its
    ``DeferredLoad`` in them) resumes after an upgrade: the trigger and ``execute_complete`` of this code read
    the old payload, and the load it names finishes."""
    assert PAYLOAD_V1.exists(), f"{PAYLOAD_V1.name} is missing: it is recorded once, from the code it describes"
    recorded = json.loads(PAYLOAD_V1.read_text())
    table = slowed_table(stack, ph)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=months.s3_uri, table=table, deferrable=True, poll_interval=0.5)
    context = fake_context()
    query_id = op.query_id(context)
    ph.stem(query_id)
    deferred = _defer(op, context)  # this code starts the insert on the server and defers
    classpath, current = deferred.trigger.serialize()
    ph.learn(current)
    ph.value(current)  # learns this run's literals (the history key's among them)
    old = ph.fill(recorded["kwargs"], current)
    assert old["query_ids"] == [str(query_id)] and old["load"]["query_id"] == str(query_id)
    assert old["load"]["steps"]["staging"]["name"] == f"{STAGING_PREFIX}{query_id.stem}"
    assert recorded["classpath"] == classpath

    event = _fire(LoadTrigger(**copy.deepcopy(old)))  # the triggerer of this code runs the old arguments
    assert event["status"] == "finished" and event["load"] == old["load"], event
    result = S3ToClickHouseOperator(task_id="load", s3_uri=months.s3_uri, table=table, deferrable=True,
                                    poll_interval=0.5).execute_complete(context, event)

    assert result["query_id"] == str(query_id) and result["written_rows"] == months.rows == count(stack, table)
    assert result["attached_to"] is None and result["mode"] == "append" and len(result["partitions"]) == 2
    assert not stack.clickhouse_client().execute(
        "SELECT name FROM system.tables WHERE name = %(n)s", {"n": f"{STAGING_PREFIX}{query_id.stem}"})
