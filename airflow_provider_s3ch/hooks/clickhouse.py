"""ClickHouseHook: the native-protocol connection to ClickHouse (clickhouse-driver)."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from airflow_provider_s3ch.compat import BaseHook
from airflow_provider_s3ch.errors import (
    ClickHouseAuthError,
    ClickHouseUnavailableError,
    LoadError,
    TableError,
)
from airflow_provider_s3ch.modes import EarlierTry
from airflow_provider_s3ch.models import (
    ClusterNode,
    LoadMetrics,
    NodeMetrics,
    ServerProfile,
    TableInfo,
    TableRef,
)

DEFAULT_PORT = 9000
DEFAULT_SECURE_PORT = 9440
_AUTH_CODES = {192, 516}  # UNKNOWN_USER, AUTHENTICATION_FAILED
_UNKNOWN_TABLE_CODES = {60, 81}  # UNKNOWN_TABLE, UNKNOWN_DATABASE
_CLIENT_EXTRA_KEYS = ("connect_timeout", "send_receive_timeout", "sync_request_timeout", "compression", "verify", "ca_certs")
_DIST_ARGS_RE = re.compile(r"^Distributed\((.*)\)", re.S)


def _parse_int_setting(value: str) -> int | None:
    """``'8'`` → 8, ``'auto(8)'`` → 8, anything else → None."""
    m = re.fullmatch(r"\s*(?:auto\()?(\d+)\)?\s*", str(value))
    return int(m.group(1)) if m else None


def _split_args(text: str) -> list[str]:
    """Split the arguments of an engine clause on top-level commas, unquoting string literals."""
    out, buf, depth, quote = [], "", 0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and i + 1 < len(text):
                buf += text[i + 1]
                i += 2
                continue
            if ch == quote:
                quote = ""
            else:
                buf += ch
        elif ch in "'`\"":
            quote = ch
        elif ch == "(":
            depth += 1
            buf += ch
        elif ch == ")":
            depth -= 1
            buf += ch
        elif ch == "," and depth == 0:
            out.append(buf.strip())
            buf = ""
        else:
            buf += ch
        i += 1
    if buf.strip():
        out.append(buf.strip())
    return out


@contextlib.contextmanager
def _quiet_driver() -> Iterator[None]:
    """Keep clickhouse-driver from logging the statement (it holds S3 credentials) at DEBUG level."""
    logger = logging.getLogger("clickhouse_driver")
    saved = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.setLevel(saved)


class ClickHouseHook(BaseHook):
    """Talk to ClickHouse over the native protocol.

    Connection fields: host, port (9000; 9440 when ``secure``), login, password,
    schema (the default database). Extra: ``secure`` (TLS), ``cluster`` (the cluster
    for distributed loads), ``region`` (the server's cloud region, for the region
    check), ``s3_endpoint_url`` (the S3 address as ClickHouse reaches it, when it
    differs from the worker's), and client options ``connect_timeout``,
    ``send_receive_timeout``, ``sync_request_timeout``, ``compression``, ``verify``,
    ``ca_certs``.

    :param clickhouse_conn_id: the Airflow connection id.
    """

    conn_name_attr = "clickhouse_conn_id"
    default_conn_name = "clickhouse_default"
    conn_type = "clickhouse"
    hook_name = "ClickHouse"

    def __init__(self, clickhouse_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clickhouse_conn_id = clickhouse_conn_id
        self._conn: Any = None
        self._client: Any = None

    # ------------------------------------------------------------------ UI
    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Relabel the connection form's fields for ClickHouse."""
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Database", "login": "User"},
            "placeholders": {
                "host": "clickhouse.example.com",
                "port": "9000 (9440 with secure)",
                "schema": "default",
                "login": "default",
                "extra": '{"secure": false, "cluster": "default", "region": "eu-west-3", '
                '"s3_endpoint_url": "http://minio:9000"}',
            },
        }

    # ------------------------------------------------------------------ connection
    @property
    def connection(self) -> Any:
        if self._conn is None:
            self._conn = self.get_connection(self.clickhouse_conn_id)
        return self._conn

    @property
    def extra(self) -> dict[str, Any]:
        return dict(self.connection.extra_dejson or {})

    @property
    def cluster(self) -> str | None:
        """The connection's ``cluster`` extra."""
        return self.extra.get("cluster") or None

    @property
    def region(self) -> str | None:
        """The connection's ``region`` extra: where the server runs."""
        return self.extra.get("region") or None

    @property
    def s3_endpoint_url(self) -> str | None:
        """The S3 address as ClickHouse reaches it (connection extra ``s3_endpoint_url``)."""
        return self.extra.get("s3_endpoint_url") or None

    @property
    def database(self) -> str:
        return self.connection.schema or "default"

    def _client_kwargs(self) -> dict[str, Any]:
        extra = self.extra
        secure = str(extra.get("secure", "false")).lower() in {"1", "true", "yes"}
        kwargs: dict[str, Any] = {
            "user": self.connection.login or "default",
            "password": self.connection.password or "",
            "database": self.database,
            "secure": secure,
            "client_name": "airflow-provider-s3ch",
            "connect_timeout": 10,
            "send_receive_timeout": 3600,
        }
        for key in _CLIENT_EXTRA_KEYS:
            if key in extra:
                kwargs[key] = extra[key]
        return kwargs

    def _port(self) -> int:
        if self.connection.port:
            return int(self.connection.port)
        return DEFAULT_SECURE_PORT if self._client_kwargs()["secure"] else DEFAULT_PORT

    def get_conn(self) -> Any:
        """A ``clickhouse_driver.Client`` on the connection's host."""
        if self._client is None:
            self._client = self.client_for(self.connection.host or "localhost", self._port())
        return self._client

    def client_for(self, host: str, port: int) -> Any:
        """A client on another node of the cluster, with this connection's credentials.

        :param host: the node's host.
        :param port: the node's native-protocol port.
        """
        from clickhouse_driver import Client

        return Client(host, port=port, **self._client_kwargs())

    def node_clients(self, nodes: Sequence[ClusterNode]) -> list[tuple[str, Any]]:
        """(address, client) for each node; the connection's own client when there are no nodes."""
        if not nodes:
            return [(f"{self.connection.host}:{self._port()}", self.get_conn())]
        return [(n.address, self.client_for(n.host, n.port)) for n in nodes]

    # ------------------------------------------------------------------ queries
    def execute(
        self,
        sql: str,
        params: dict[str, Any] | None = None,
        *,
        settings: dict[str, Any] | None = None,
        query_id: str | None = None,
        client: Any = None,
    ) -> list[tuple[Any, ...]]:
        """Run one query and return its rows; errors become the provider's errors.

        :param sql: the query; ``%(name)s`` placeholders are filled from ``params``.
        :param params: query parameters (quoted by the driver).
        :param settings: per-query settings.
        :param query_id: the query id to run under.
        :param client: another node's client (default: the connection's).
        """
        client = client or self.get_conn()
        try:
            return client.execute(sql, params, settings=settings, query_id=query_id)
        except Exception as exc:  # noqa: BLE001 - translated below
            raise self.translate_error(exc) from exc

    def translate_error(self, exc: Exception) -> Exception:
        """Map a clickhouse-driver error to the provider's error classes."""
        from clickhouse_driver import errors as ch_errors

        code = getattr(exc, "code", None)
        text = str(getattr(exc, "message", None) or exc).split("Stack trace:")[0].strip()
        where = f"{self.connection.host}:{self._port()}"
        if code in _AUTH_CODES:
            return ClickHouseAuthError(
                f"ClickHouse at {where} refused user {self.connection.login or 'default'!r}: wrong user or "
                f"password; fix the login and password of connection {self.clickhouse_conn_id!r}"
            )
        if isinstance(exc, ch_errors.NetworkError | ch_errors.SocketTimeoutError | OSError | EOFError):
            return ClickHouseUnavailableError(
                f"ClickHouse at {where} did not answer ({text}); check host and port of connection "
                f"{self.clickhouse_conn_id!r} and that the server runs"
            )
        if code in _UNKNOWN_TABLE_CODES:
            return TableError(f"ClickHouse: {text}")
        return LoadError(f"ClickHouse error {code}: {text}" if code else f"ClickHouse error: {text}")

    def run_insert(self, sql: str, *, query_id: str, log: Any = None, log_every: float = 10.0) -> None:
        """Run the load under ``query_id``, logging the server's progress every ``log_every`` seconds.

        :param sql: the full statement (with secrets: never log it).
        :param query_id: the deterministic query id.
        :param log: a logger for progress lines.
        :param log_every: seconds between progress lines.
        """
        client = self.get_conn()
        last = time.monotonic()
        try:
            with _quiet_driver():
                progress = client.execute_with_progress(sql, query_id=query_id)
                for rows, total in progress:
                    if log is not None and time.monotonic() - last >= log_every:
                        last = time.monotonic()
                        log.info("Progress: %d rows read%s", rows, f" of {total}" if total else "")
                progress.get_result()
        except Exception as exc:  # noqa: BLE001 - translated below
            raise self.translate_error(exc) from exc

    def kill_query(self, query_id: str, nodes: Sequence[ClusterNode] = ()) -> None:
        """``KILL QUERY`` a query id (and its secondary queries) on each node (best effort).

        Runs on fresh connections: the hook's own client is busy with the load while
        ``on_kill`` runs in another thread, and a native-protocol connection takes one
        query at a time.
        """
        targets = [(n.host, n.port) for n in nodes] or [(self.connection.host or "localhost", self._port())]
        for host, port in targets:
            try:
                client = self.client_for(host, port)
                try:
                    client.execute(
                        "KILL QUERY WHERE query_id = %(q)s OR initial_query_id = %(q)s ASYNC", {"q": query_id}
                    )
                finally:
                    client.disconnect()
            except Exception as exc:  # noqa: BLE001 - best effort on kill
                self.log.warning("KILL QUERY on %s:%s failed: %s", host, port, exc)

    # ------------------------------------------------------------------ earlier tries
    def earlier_tries(self, id_regex: str, nodes: Sequence[ClusterNode] = ()) -> list[EarlierTry]:
        """Every query whose id matches ``id_regex``: running (``system.processes``, the query
        itself or its secondary queries) or done (``system.query_log``, after flushing), on
        each node (the connection's node when ``nodes`` is empty).

        :param id_regex: an RE2 pattern for ``match(query_id, …)``, e.g. ``^s3ch-<stem>-try[0-9]+$``.
        :param nodes: the cluster's nodes for a distributed load.
        """
        out: list[EarlierTry] = []
        for address, client in self.node_clients(nodes):
            running = self.execute(
                "SELECT DISTINCT if(match(query_id, %(r)s), query_id, initial_query_id) FROM system.processes "
                "WHERE match(query_id, %(r)s) OR match(initial_query_id, %(r)s)",
                {"r": id_regex},
                client=client,
            )
            for (query_id,) in running:
                out.append(self._earlier(query_id, "running", None, address))
            self.execute("SYSTEM FLUSH LOGS", client=client)
            done = self.execute(
                "SELECT query_id, type, exception FROM system.query_log "
                "WHERE match(query_id, %(r)s) AND is_initial_query AND type != 'QueryStart' "
                "AND event_date >= yesterday() ORDER BY event_time_microseconds",
                {"r": id_regex},
                client=client,
            )
            for query_id, kind, exception in done:
                state = "finished" if str(kind) == "QueryFinish" else "failed"
                error = str(exception).split("Stack trace:")[0].strip() or None
                out.append(self._earlier(query_id, state, error, address))
        return out

    @staticmethod
    def _earlier(query_id: str, state: str, error: str | None, node: str) -> EarlierTry:
        m = re.search(r"-try(\d+)$", str(query_id))
        return EarlierTry(
            query_id=str(query_id), try_number=int(m.group(1)) if m else 0, state=state, error=error, node=node
        )

    def running_queries(
        self, query_ids: Sequence[str], nodes: Sequence[ClusterNode] = ()
    ) -> list[tuple[str, str, float, int, int]]:
        """(node, query_id, elapsed, read_rows, written_rows) of each running query among
        ``query_ids`` or their secondary queries, on each node.

        :param query_ids: the queries.
        :param nodes: the cluster's nodes (the connection's node when empty).
        """
        running: list[tuple[str, str, float, int, int]] = []
        for address, client in self.node_clients(nodes):
            rows = self.execute(
                "SELECT query_id, elapsed, read_rows, written_rows FROM system.processes "
                "WHERE query_id IN %(q)s OR initial_query_id IN %(q)s",
                {"q": tuple(query_ids)},
                client=client,
            )
            running.extend((address, str(r[0]), float(r[1]), int(r[2]), int(r[3])) for r in rows)
        return running

    def wait_for_queries(
        self, query_ids: Sequence[str], nodes: Sequence[ClusterNode] = (), *, timeout: float, poll: float = 1.0,
        log: Any = None,
    ) -> None:
        """Wait until none of ``query_ids`` (nor their secondary queries) runs on any node.

        :param query_ids: the queries to wait for.
        :param nodes: the cluster's nodes for a distributed load.
        :param timeout: seconds; then :class:`LoadError` (the task's retries apply).
        :param poll: seconds between looks at ``system.processes``.
        :param log: a logger for progress lines.
        """
        deadline = time.monotonic() + timeout
        last_log = 0.0
        while True:
            running = self.running_queries(query_ids, nodes)
            if not running:
                return
            if time.monotonic() > deadline:
                raise LoadError(
                    f"earlier try {', '.join(query_ids)} still runs after {timeout:.0f} s; not starting a second "
                    "load of the same files (kill it with KILL QUERY, or raise earlier_try_timeout)"
                )
            if log is not None and time.monotonic() - last_log >= 10:
                last_log = time.monotonic()
                for address, query_id, elapsed, read_rows, written_rows in running:
                    log.info(
                        "Waiting for earlier try %s on %s: %.0f s, %d rows read, %d written",
                        query_id, address, elapsed, read_rows, written_rows,
                    )
            time.sleep(poll)

    # ------------------------------------------------------------------ staging
    def table_exists(self, table: TableRef) -> bool:
        """Whether the table exists (its database defaults to the connection's)."""
        return self.table_comment(table) is not None

    def table_comment(self, table: TableRef) -> str | None:
        """The table's comment ('' when none); None when the table does not exist."""
        rows = self.execute(
            "SELECT comment FROM system.tables WHERE database = %(d)s AND name = %(t)s",
            {"d": table.database or self.database, "t": table.name},
        )
        return str(rows[0][0]) if rows else None

    def database_engine(self, database: str) -> str | None:
        """The database's engine (``Atomic``, ``Replicated``, ``Ordinary``…); None when unknown."""
        rows = self.execute("SELECT engine FROM system.databases WHERE name = %(d)s", {"d": database})
        return str(rows[0][0]) if rows else None

    def dependent_views(self, table: TableRef) -> list[str]:
        """Materialized views (and other dependents) that read from the table, ``db.name``."""
        rows = self.execute(
            "SELECT dependencies_database, dependencies_table FROM system.tables "
            "WHERE database = %(d)s AND name = %(t)s",
            {"d": table.database or self.database, "t": table.name},
        )
        if not rows:
            return []
        databases, tables = rows[0]
        return [f"{d}.{t}" for d, t in zip(databases, tables, strict=False)]

    def partitions(self, table: TableRef) -> list[tuple[str, str]]:
        """(partition_id, partition) of the table's active parts that hold rows, in order.

        A partition moved away leaves an active empty part behind for a while: it is no
        partition of the table's data (and must never replace a partition of the target).
        """
        rows = self.execute(
            "SELECT partition_id, any(partition) FROM system.parts "
            "WHERE database = %(d)s AND table = %(t)s AND active AND rows > 0 "
            "GROUP BY partition_id ORDER BY partition_id",
            {"d": table.database or self.database, "t": table.name},
        )
        return [(str(pid), str(value)) for pid, value in rows]

    # ------------------------------------------------------------------ profile
    def get_profile(self, table: TableRef, cluster: str | None = None) -> ServerProfile:
        """Read what the planner needs: version, cores, memory, cluster nodes, the target table.

        Deployments differ (some lack ``system.asynchronous_metrics``): every probe
        has a fallback, and a missing system table never fails the load.

        :param table: the target table (its database defaults to the connection's).
        :param cluster: the cluster for distributed loads (default: connection extra ``cluster``).
        """
        version = str(self.execute("SELECT version()")[0][0])
        cores = self._cores()
        memory, source = self._memory()
        cluster = cluster or self.cluster
        nodes = self.cluster_nodes(cluster) if cluster else []
        node_cores = self._node_cores(nodes) if len(nodes) > 1 else [cores]
        return ServerProfile(
            version=version,
            cores=cores,
            memory_bytes=memory,
            memory_source=source,
            region=self.region,
            cluster=cluster,
            nodes=nodes,
            node_cores=node_cores,
            table=self.table_info(table),
        )

    def _first(self, queries: Iterable[str], client: Any = None) -> Any:
        """The first value the first query that works returns; None when none works."""
        for sql in queries:
            try:
                rows = (client or self.get_conn()).execute(sql)
            except Exception as exc:  # noqa: BLE001 - probes fall back
                if getattr(exc, "code", None) in _AUTH_CODES or not hasattr(exc, "code"):
                    raise self.translate_error(exc) from exc
                continue
            if rows and rows[0][0] not in (None, ""):
                return rows[0][0]
        return None

    def _cores(self, client: Any = None) -> int:
        value = self._first(
            [
                "SELECT value FROM system.settings WHERE name = 'max_threads'",
                "SELECT getSetting('max_threads')",
                "SELECT value FROM system.asynchronous_metrics WHERE metric = 'NumberOfCPUCores'",
            ],
            client,
        )
        parsed = _parse_int_setting(str(value)) if value is not None else None
        return max(1, parsed or 1)

    def _memory(self) -> tuple[int, str]:
        probes = [
            ("SELECT toUInt64(value) FROM system.server_settings WHERE name = 'max_server_memory_usage'",
             "system.server_settings.max_server_memory_usage"),
            ("SELECT toUInt64(value) FROM system.asynchronous_metrics WHERE metric = 'OSMemoryTotal'",
             "system.asynchronous_metrics.OSMemoryTotal"),
        ]
        for sql, source in probes:
            value = self._first([sql])
            if value:
                return int(value), source
        return 0, "unknown"

    def cluster_nodes(self, cluster: str) -> list[ClusterNode]:
        rows = self.execute(
            "SELECT host_name, port, shard_num, replica_num FROM system.clusters "
            "WHERE cluster = %(c)s ORDER BY shard_num, replica_num",
            {"c": cluster},
        )
        if not rows:
            known = [r[0] for r in self.execute("SELECT DISTINCT cluster FROM system.clusters")]
            raise TableError(
                f"cluster {cluster!r} is not in system.clusters (known: {', '.join(known) or 'none'}); "
                "fix the operator's cluster argument or the connection extra 'cluster'"
            )
        return [ClusterNode(host=r[0], port=int(r[1]), shard_num=int(r[2]), replica_num=int(r[3])) for r in rows]

    def _node_cores(self, nodes: Sequence[ClusterNode]) -> list[int]:
        out = []
        for _, client in self.node_clients(nodes):
            try:
                out.append(self._cores(client))
            except Exception:  # noqa: BLE001 - a node we cannot reach counts as the initiator's cores
                out.append(self._cores())
        return out

    def table_info(self, table: TableRef) -> TableInfo:
        """The target table's engine, keys and, for a Distributed table, what it points at."""
        database = table.database or self.database
        rows = self.execute(
            "SELECT engine, partition_key, sorting_key, engine_full FROM system.tables "
            "WHERE database = %(d)s AND name = %(t)s",
            {"d": database, "t": table.name},
        )
        if not rows:
            raise TableError(
                f"table {database}.{table.name} does not exist on {self.connection.host}:{self._port()}; "
                "create it first (the operator loads into existing tables) or fix the table argument"
            )
        engine, partition_key, sorting_key, engine_full = rows[0]
        info = TableInfo(
            database=database, name=table.name, engine=engine, partition_key=partition_key, sorting_key=sorting_key
        )
        m = _DIST_ARGS_RE.match(engine_full or "")
        if engine == "Distributed" and m:
            args = _split_args(m.group(1))
            info.dist_cluster = args[0] if args else None
            info.local_database = args[1] if len(args) > 1 else None
            info.local_table = args[2] if len(args) > 2 else None
            info.sharding_key = args[3] if len(args) > 3 else None
            if info.local_database and info.local_table:
                local = self.execute(
                    "SELECT engine FROM system.tables WHERE database = %(d)s AND name = %(t)s",
                    {"d": info.local_database, "t": info.local_table},
                )
                info.local_engine = local[0][0] if local else None
        return info

    # ------------------------------------------------------------------ metrics
    def flush_logs(self, nodes: Sequence[ClusterNode] = ()) -> None:
        """``SYSTEM FLUSH LOGS`` on each node, so ``system.query_log`` holds the load."""
        for _, client in self.node_clients(nodes):
            self.execute("SYSTEM FLUSH LOGS", client=client)

    _LOG_COLUMNS = (
        "query_id, written_rows, written_bytes, read_rows, read_bytes, query_duration_ms, memory_usage, "
        "Settings, is_initial_query, type, exception"
    )

    def query_log(self, query_id: str, *, client: Any = None, initial: bool = True) -> list[tuple[Any, ...]]:
        """Finished entries for a query id (``initial``) or for its secondary queries on a node."""
        column = "query_id" if initial else "initial_query_id"
        extra = "" if initial else " AND is_initial_query = 0"
        return self.execute(
            f"SELECT {self._LOG_COLUMNS} FROM system.query_log WHERE {column} = %(q)s{extra} "  # noqa: S608
            "AND type != 'QueryStart' AND event_date >= yesterday() ORDER BY event_time_microseconds",
            {"q": query_id},
            client=client,
        )

    def load_metrics(
        self,
        query_id: str,
        nodes: Sequence[ClusterNode] = (),
        distributed: bool = False,
        target_distributed: bool = False,
        wait_seconds: float = 10.0,
    ) -> LoadMetrics:
        """The load's figures from ``system.query_log``.

        - A single-node load into a local table is one entry.
        - A distributed load's rows are written by each node's secondary inserts
          (``initial_query_id`` = the load's id); the initiator's own entry shows
          ``written_rows = 0``. Totals are the sums over nodes.
        - A single-node load into a Distributed table (foreground insert) counts every
          row twice on the initiator: once into the Distributed table, once into its own
          shard. The other shards' rows are their secondary inserts; the initiator's
          shard holds ``written_rows - read_rows`` (every row read is routed: the load is
          ``SELECT *``), and its bytes are that share of its ``written_bytes``.

        :param query_id: the load's query id.
        :param nodes: the cluster's nodes.
        :param distributed: whether the load ran on every node (s3Cluster).
        :param target_distributed: whether the target is a Distributed table.
        :param wait_seconds: how long to wait for log entries to appear after flushing.
        """
        fan_out = distributed or target_distributed
        deadline = time.monotonic() + wait_seconds
        while True:
            self.flush_logs(nodes if fan_out else ())
            initial = self.query_log(query_id)
            if initial or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not initial:
            raise LoadError(f"query {query_id} is not in system.query_log; is the query_log enabled on the server?")
        entry = initial[-1]
        if entry[9] != "QueryFinish":
            raise LoadError(f"query {query_id} failed on the server: {str(entry[10]).split('Stack trace:')[0]}")
        settings = {str(k): str(v) for k, v in dict(entry[7]).items()}
        here = f"{self.connection.host}:{self._port()}"
        per_node: list[NodeMetrics] = []
        if fan_out:
            for address, client in self.node_clients(nodes):
                for row in self.query_log(query_id, client=client, initial=False):
                    if row[9] == "QueryFinish" and str(row[0]) != query_id:
                        per_node.append(self._node_metrics(address, row))
        if target_distributed and not distributed:
            own_rows = max(0, int(entry[1]) - int(entry[3]))
            own_bytes = int(entry[2]) * own_rows // int(entry[1]) if int(entry[1]) else 0
            own = self._node_metrics(here, entry).model_copy(
                update={"written_rows": own_rows, "written_bytes": own_bytes, "read_rows": 0, "read_bytes": 0}
            )
            per_node = [own] + [n for n in per_node if n.node != here]
        per_node = self._merge_by_node(per_node) or [self._node_metrics(here, entry)]
        return LoadMetrics(
            query_id=query_id,
            written_rows=sum(n.written_rows for n in per_node),
            written_bytes=sum(n.written_bytes for n in per_node),
            read_rows=sum(n.read_rows for n in per_node) if distributed else int(entry[3]),
            read_bytes=sum(n.read_bytes for n in per_node) if distributed else int(entry[4]),
            duration_ms=int(entry[5]),
            memory_usage=max([int(entry[6])] + [n.memory_usage for n in per_node]),
            settings=settings,
            nodes=per_node,
        )

    @staticmethod
    def _merge_by_node(entries: list[NodeMetrics]) -> list[NodeMetrics]:
        """One figure per node: a node may run several secondary inserts for one load."""
        merged: dict[str, NodeMetrics] = {}
        for e in entries:
            if e.node not in merged:
                merged[e.node] = e
                continue
            m = merged[e.node]
            merged[e.node] = m.model_copy(
                update={
                    "query_id": m.query_id,
                    "written_rows": m.written_rows + e.written_rows,
                    "written_bytes": m.written_bytes + e.written_bytes,
                    "read_rows": m.read_rows + e.read_rows,
                    "read_bytes": m.read_bytes + e.read_bytes,
                    "duration_ms": max(m.duration_ms, e.duration_ms),
                    "memory_usage": max(m.memory_usage, e.memory_usage),
                }
            )
        return list(merged.values())

    @staticmethod
    def _node_metrics(address: str, row: tuple[Any, ...]) -> NodeMetrics:
        return NodeMetrics(
            node=address,
            query_id=str(row[0]),
            written_rows=int(row[1]),
            written_bytes=int(row[2]),
            read_rows=int(row[3]),
            read_bytes=int(row[4]),
            duration_ms=int(row[5]),
            memory_usage=int(row[6]),
        )
