"""ClickHouseHook: the native-protocol connection to ClickHouse (clickhouse-driver).

Connection (clients cached per node, closed), execute, error translation by the core's
code table, the insert, kill, and reads that return typed rows. It makes no decision: what
a load runs and what its figures mean is the core's business. What the server knows of the
load's queries (running, finished, their figures) is read by :mod:`.query_log`.

It is also Airflow's SQL hook for the ``clickhouse_native`` connection type (a
:class:`~airflow.providers.common.sql.hooks.sql.DbApiHook` over ``clickhouse_driver.dbapi``), so
``SQLExecuteQueryOperator``, the SQL sensors, ``get_records`` and ``get_df`` work with it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from airflow.providers.common.sql.hooks.sql import DbApiHook
from clickhouse_driver import Client, dbapi
from clickhouse_driver import errors as ch_errors
from pydantic import BaseModel

from airflow_provider_s3ch import NATIVE_CONN_TYPE
from airflow_provider_s3ch.core.errors import classify_server_error, is_query_memory_limit
from airflow_provider_s3ch.core.models import (
    ClusterNode,
    NodeWorkloads,
    ServerProfile,
    TableInfo,
    TableRef,
    WorkloadEntity,
)
from airflow_provider_s3ch.core.server import CORES_PROBES, MEMORY_PROBES, TABLE_INFO_SQL, parse_int_setting, table_info
from airflow_provider_s3ch.errors import (
    ClickHouseAuthError,
    ClickHouseQueryError,
    ClickHouseUnavailableError,
    ClusterError,
    InvalidRequestError,
    LoadError,
    QueryMemoryLimitError,
    S3chError,
    TableError,
)
from airflow_provider_s3ch.hooks.quiet import quiet_loggers

DEFAULT_PORT = 9000
DEFAULT_SECURE_PORT = 9440
#: The connection type of Apache Airflow's own ClickHouse provider (HTTP): its ``port`` is the HTTP
#: port, so the native port comes from the extra ``native_port`` or the default for ``secure``.
HTTP_CONN_TYPE = "clickhouse"
HTTP_PORTS = (8123, 8443)
#: A node's workload scheduling in one read: its workloads (name, parent, DDL) and resources (name, DDL).
WORKLOADS_SQL = (
    "SELECT (SELECT groupArray((name, parent, create_query)) FROM system.workloads), "
    "(SELECT groupArray((name, create_query)) FROM system.resources)"
)
_CLIENT_EXTRA_KEYS = (
    "connect_timeout", "send_receive_timeout", "sync_request_timeout", "compression", "verify", "ca_certs"
)
Row = TypeVar("Row", bound=BaseModel)


def _true(value: Any) -> bool:
    """A connection extra's boolean: JSON ``true`` or the strings 1/true/yes/on."""
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


#: Client options that arrive as text from a connection URI's query string.
_CLIENT_EXTRA_TYPES: dict[str, Any] = {
    "connect_timeout": float,
    "send_receive_timeout": float,
    "sync_request_timeout": float,
    "verify": _true,
}


class ClickHouseHook(DbApiHook):
    """Talk to ClickHouse over the native protocol; clients are cached per node and closed by :meth:`close`.

    Connection type ``clickhouse_native``: host, port (9000; 9440 when ``secure``), login, password,
    schema (the default database). Extra: ``secure``, ``cluster`` (for distributed loads), ``region``
    (for the region check), ``s3_endpoint_url`` (S3 as ClickHouse reaches it), ``workload`` (the server's
    workload loads run in when they name none: docs/many-loads.md), and the client options
    ``connect_timeout``, ``send_receive_timeout``, ``sync_request_timeout``, ``compression``, ``verify``,
    ``ca_certs``.

    A connection of type ``clickhouse`` (Apache Airflow's ClickHouse provider, HTTP) works too: the
    same host, login, password and schema; its ``port`` is the HTTP port and is not used: the native
    port is the extra ``native_port``, else 9440 when ``secure``, else 9000.

    :meth:`get_conn` is a DB-API 2.0 connection (``clickhouse_driver.dbapi``), for Airflow's SQL
    operators and sensors; :meth:`client` and :meth:`client_for` are native clients.

    :param clickhouse_conn_id: the Airflow connection id.
    :param schema: a database other than the connection's, for unqualified names.
    """

    conn_name_attr = "clickhouse_conn_id"
    default_conn_name = "clickhouse_native_default"
    conn_type = NATIVE_CONN_TYPE
    hook_name = "ClickHouse (native protocol)"
    supports_autocommit = True  # every statement commits on its own: there is nothing to commit
    _test_connection_sql = "SELECT 1"

    def __init__(
        self, clickhouse_conn_id: str = default_conn_name, *, schema: str | None = None, **kwargs: Any
    ) -> None:
        # Airflow's SQL operators pass the connection's extras as keyword arguments: DbApiHook ignores them.
        super().__init__(clickhouse_conn_id=clickhouse_conn_id, schema=schema, **kwargs)
        self.clickhouse_conn_id = clickhouse_conn_id
        self._clients: dict[tuple[str, int], Client] = {}
        conn = self.connection
        extra = dict(conn.extra_dejson or {})
        self.cluster: str | None = extra.get("cluster") or None
        self.region: str | None = extra.get("region") or None
        self.s3_endpoint_url: str | None = extra.get("s3_endpoint_url") or None
        self.workload: str | None = str(extra.get("workload") or "").strip() or None
        self.database: str = schema or conn.schema or "default"
        self.login: str = conn.login or "default"
        secure = _true(extra.get("secure", False))
        self.host: str = conn.host or "localhost"
        self.port: int = self._native_port(conn.conn_type, conn.port, extra, secure)
        self.address = f"{self.host}:{self.port}"
        self._client_kwargs: dict[str, Any] = {
            "user": self.login,
            "password": conn.password or "",
            "database": self.database,
            "secure": secure,
            "client_name": "airflow-provider-s3ch",
            "connect_timeout": 10,
            "send_receive_timeout": 3600,
            "settings_is_important": True,  # an unknown setting sent in the protocol is an error, not ignored
            # a form leaves empty fields as null: the defaults apply
            **{
                key: _CLIENT_EXTRA_TYPES.get(key, lambda v: v)(extra[key])
                for key in _CLIENT_EXTRA_KEYS
                if extra.get(key) not in (None, "")
            },
        }

    def _native_port(self, conn_type: str | None, port: int | None, extra: dict[str, Any], secure: bool) -> int:
        """The native protocol's port: the connection's own, except on an HTTP (``clickhouse``) connection."""
        default = DEFAULT_SECURE_PORT if secure else DEFAULT_PORT
        if conn_type != HTTP_CONN_TYPE:
            return int(port) if port else default
        native_port = extra.get("native_port")
        if native_port in (None, ""):
            self.log.info(
                "Connection %r is of type %r (HTTP, port %s): the native protocol's port is %d (%s); "
                "set the extra 'native_port' for another",
                self.clickhouse_conn_id,
                conn_type,
                port,
                default,
                "secure" if secure else "not secure",
            )
            return default
        try:
            return int(native_port)
        except (TypeError, ValueError):
            raise InvalidRequestError(
                f"connection {self.clickhouse_conn_id!r}: extra 'native_port' is {native_port!r}, not a port "
                "number; set it to the server's native protocol port (9000, 9440 with TLS)"
            ) from None

    @property
    def schema(self) -> str:
        """The default database (Airflow's SQL operators set it from their ``database`` argument)."""
        return self.database

    @schema.setter
    def schema(self, value: str | None) -> None:
        if value and value != self.database:
            self.close()
            self.database = self._client_kwargs["database"] = value

    # ------------------------------------------------------------------ connections
    def get_conn(self) -> dbapi.connection.Connection:
        """A DB-API 2.0 connection (``clickhouse_driver.dbapi``) with this connection's settings: what
        Airflow's SQL operators, sensors, ``get_records`` and ``get_df`` use. Closing it closes its cursors."""
        kwargs = {k: v for k, v in self._client_kwargs.items() if k not in ("user", "password", "database")}
        return dbapi.connect(
            host=self.host,
            port=self.port,
            user=self.login,
            password=self._client_kwargs["password"],
            database=self.database,
            **kwargs,
        )

    def set_autocommit(self, conn: Any, autocommit: bool) -> None:
        """Nothing to set: ClickHouse has no transactions."""

    def get_autocommit(self, conn: Any) -> bool:
        """Always: ClickHouse has no transactions."""
        return True

    def test_connection(self) -> tuple[bool, str]:
        """Log in and ask the server who it is (Airflow's connection test); the message names the problem."""
        client = self.client_for(self.host, self.port, fresh=True)
        try:
            rows = client.execute("SELECT version(), currentUser(), currentDatabase()")
        except Exception as exc:  # noqa: BLE001 - the test reports, it does not raise
            message = str(self.translate_error(exc))
            if isinstance(exc, ch_errors.UnexpectedPacketFromServerError) or self.port in HTTP_PORTS:
                message += (
                    f"; is port {self.port} ClickHouse's HTTP port? The native protocol listens on "
                    f"{DEFAULT_PORT} ({DEFAULT_SECURE_PORT} with TLS): fix the port of connection "
                    f"{self.clickhouse_conn_id!r}"
                )
            return False, message
        finally:
            client.disconnect()
        version, user, database = rows[0]
        return True, (
            f"Connected to ClickHouse {version} at {self.address} (native protocol) as user {user!r}, "
            f"database {database!r}"
        )

    # ------------------------------------------------------------------ clients
    def client(self) -> Client:
        """The cached native ``clickhouse_driver.Client`` on the connection's host."""
        return self.client_for(self.host, self.port)

    def client_for(self, host: str, port: int, *, fresh: bool = False) -> Client:
        """A client on a node of the cluster, with this connection's credentials; cached unless ``fresh``."""
        if fresh:
            return Client(host, port=port, **self._client_kwargs)
        if (host, port) not in self._clients:
            self._clients[(host, port)] = Client(host, port=port, **self._client_kwargs)
        return self._clients[(host, port)]

    def node_clients(self, nodes: Sequence[ClusterNode]) -> list[tuple[str, Client]]:
        """(address, client) for each node; the connection's own client when there are no nodes."""
        if not nodes:
            return [(self.address, self.client())]
        return [(n.address, self.client_for(n.host, n.port)) for n in nodes]

    def close(self) -> None:
        """Disconnect every cached client."""
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.disconnect()
        self._clients.clear()

    # ------------------------------------------------------------------ queries
    def execute(
        self, sql: str, params: dict[str, Any] | None = None, *, settings: dict[str, Any] | None = None,
        query_id: str | None = None, client: Client | None = None, **options: Any,
    ) -> Any:
        """Run one query and return its rows; errors become the provider's errors."""
        try:
            return (client or self.client()).execute(sql, params, settings=settings, query_id=query_id, **options)
        except Exception as exc:
            raise self.translate_error(exc) from exc

    def rows(
        self, model: type[Row], sql: str, params: dict[str, Any] | None = None, *, client: Client | None = None,
        **fields: Any,
    ) -> list[Row]:
        """Run a query and return its rows as ``model`` instances, by column name (plus ``fields``)."""
        data, columns = self.execute(sql, params, client=client, with_column_types=True)
        names = [name for name, _ in columns]
        return [model.model_validate({**dict(zip(names, row, strict=True)), **fields}) for row in data]

    def translate_error(self, exc: Exception) -> S3chError:
        """Map a clickhouse-driver error to the provider's errors, by the code table in the core."""
        code = getattr(exc, "code", None)
        text = str(getattr(exc, "message", None) or exc).split("Stack trace:")[0].strip()
        if isinstance(exc, ch_errors.NetworkError | ch_errors.SocketTimeoutError | OSError | EOFError):
            return ClickHouseUnavailableError(
                f"ClickHouse at {self.address} did not answer ({text}); check host and port of connection "
                f"{self.clickhouse_conn_id!r} and that the server runs"
            )
        kind, hint = classify_server_error(code, text)
        message = f"ClickHouse error {code} ({hint}): {text}" if code else f"ClickHouse error: {text}"
        if kind == "auth":
            return ClickHouseAuthError(
                f"ClickHouse at {self.address} refused user {self.login!r}: wrong user or "
                f"password; fix the login and password of connection {self.clickhouse_conn_id!r}"
            )
        if kind == "unknown_table":
            return TableError(f"ClickHouse: {text}")
        if kind == "terminal" and is_query_memory_limit(code, text):
            return QueryMemoryLimitError(f"{message}; retrying with the same plan would fail the same way")
        if kind == "terminal":
            return ClickHouseQueryError(f"{message}; retrying would fail the same way: fix the statement or the data")
        return LoadError(message)

    def run_insert(
        self, sql: str, *, query_id: str, settings: dict[str, Any] | None = None, log: logging.Logger | None = None,
        log_every: float = 10.0,
    ) -> None:
        """Run the load under ``query_id`` with ``settings`` sent in the protocol (the statement holds
        secrets: never logged), logging progress.

        The log says when the server's first progress came: under a workload (docs/many-loads.md) the
        server holds the query back until its ``reserve_memory`` is free, so that is the wait seen from
        here; the server's own figure is in ``system.query_log`` (the XCom's ``admission_wait_ms``)."""
        started = last = time.monotonic()
        running = False
        try:
            with quiet_loggers("clickhouse_driver"):
                progress = self.client().execute_with_progress(sql, settings=settings, query_id=query_id)
                for rows, total in progress:
                    if log is not None and not running:
                        running = True
                        log.info("The server runs the load: its first progress came %.1f s after the statement "
                                 "was sent (under a workload, after the wait for admission)",
                                 time.monotonic() - started)
                    if log is not None and time.monotonic() - last >= log_every:
                        last = time.monotonic()
                        log.info("Progress: %d rows read%s", rows, f" of {total}" if total else "")
                progress.get_result()
        except Exception as exc:
            raise self.translate_error(exc) from exc

    def kill_query(self, query_id: str, nodes: Sequence[ClusterNode] = ()) -> None:
        """``KILL QUERY`` a query id and its secondary queries on each node (best effort), on fresh
        connections: the cached client is busy with the load while ``on_kill`` runs in another thread."""
        for host, port in [(n.host, n.port) for n in nodes] or [(self.host, self.port)]:
            client = self.client_for(host, port, fresh=True)
            try:
                client.execute("KILL QUERY WHERE query_id = %(q)s OR initial_query_id = %(q)s ASYNC", {"q": query_id})
            except Exception as exc:  # noqa: BLE001 - best effort on kill
                self.log.warning("KILL QUERY on %s:%s failed: %s", host, port, exc)
            finally:
                client.disconnect()

    # ------------------------------------------------------------------ the HTTP interface (deferrable loads)
    def http_endpoint(self) -> tuple[str, int, bool]:
        """(host, port, secure) of the server's HTTP interface: the connection's extra ``http_port``, else the
        port of a ``clickhouse`` (HTTP) connection, else 8443 with ``secure`` and 8123 without."""
        conn = self.connection
        extra = dict(conn.extra_dejson or {})
        secure = _true(extra.get("secure", False))
        value = extra.get("http_port")
        if value in (None, ""):
            port = int(conn.port) if conn.conn_type == HTTP_CONN_TYPE and conn.port else HTTP_PORTS[1 if secure else 0]
            return self.host, port, secure
        try:
            return self.host, int(value), secure
        except (TypeError, ValueError):
            raise InvalidRequestError(
                f"connection {self.clickhouse_conn_id!r}: extra 'http_port' is {value!r}, not a port number; set it "
                f"to the server's HTTP port ({HTTP_PORTS[0]}, {HTTP_PORTS[1]} with TLS)"
            ) from None

    def server_error(self, code: int, text: str) -> S3chError:
        """The provider's error for a server error known by its code and text (the HTTP interface's, or a
        failed query's ``system.query_log`` entry), by the same table as the native protocol's errors."""
        return self.translate_error(ch_errors.ServerException(text, code))

    def start_insert_http(
        self, sql: str, *, query_id: str, settings: dict[str, Any] | None = None, log: logging.Logger | None = None,
        confirm_timeout: float | None = None, interval: float = 0.1, log_every: float = 30.0,
    ) -> bool:
        """Start the load over the server's HTTP interface under ``query_id`` and return once the server runs
        it, without waiting for its end: the server goes on with an HTTP query whose client went away (the
        native protocol's server aborts it), so the load outlives this process.

        Under workload scheduling (docs/many-loads.md) the server lists a query only once it admitted it: an
        HTTP insert whose client left while it waited for admission still runs once admitted, unseen until
        then, so the request stays open until the server lists the query.

        The statement (it holds the S3 credentials) goes in the request's body, the user and password in
        its headers; the URL holds the query id, the database and ``settings``, which apply before the
        statement is parsed. The server runs the query once it lists it in ``system.processes`` (read here
        over the native protocol); then the socket is closed.

        :param sql: the statement.
        :param query_id: the load's query id.
        :param settings: the settings sent beside the statement.
        :param log: where to say what happened (never the statement).
        :param confirm_timeout: how long to wait for the server to list the query (it may wait for admission);
            default: the connection's ``send_receive_timeout`` (3600 s), as long as a native query may go silent.
        :param interval: seconds between two looks at ``system.processes`` in the first 5 s (then 1 s).
        :param log_every: seconds between two log lines while the server has not listed the query.
        :return: True when the server had already finished the load before it was seen running (a short
            load); False when it runs.
        :raises S3chError: the server refused or failed the statement (by its code, as over the native
            protocol), or did not answer (:class:`ClickHouseUnavailableError`), or did not list the query in
            time (:class:`LoadError`; the query is killed).
        """
        import http.client
        import select
        import ssl
        from urllib.parse import urlencode

        from airflow_provider_s3ch.core.deferral import http_params

        host, port, secure = self.http_endpoint()
        timeout = float(self._client_kwargs.get("connect_timeout") or 10)
        path = "/?" + urlencode(http_params(query_id, self.database, dict(settings or {})))
        headers = {
            "X-ClickHouse-User": self.login,
            "X-ClickHouse-Key": str(self._client_kwargs.get("password") or ""),
            "Content-Type": "text/plain; charset=UTF-8",
        }
        conn: http.client.HTTPConnection
        if secure:
            context = ssl.create_default_context(cafile=self._client_kwargs.get("ca_certs") or None)
            if self._client_kwargs.get("verify") is False:
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        where = f"{host}:{port}"
        try:
            try:
                conn.request("POST", path, body=sql.encode(), headers=headers)
            except OSError as exc:
                raise ClickHouseUnavailableError(
                    f"ClickHouse's HTTP interface at {where} did not answer ({exc}); a deferrable load starts its "
                    f"insert over HTTP: set the extra 'http_port' of connection {self.clickhouse_conn_id!r} to the "
                    "server's HTTP port"
                ) from exc
            sent = last = time.monotonic()
            limit = float(confirm_timeout if confirm_timeout is not None
                          else self._client_kwargs.get("send_receive_timeout") or 3600)
            while True:
                # every ``interval`` at first, then every second (a wait for admission may be long)
                readable, _, _ = select.select([conn.sock], [], [], interval if time.monotonic() - sent < 5 else 1.0)
                if readable:
                    return self._http_outcome(conn, where)
                if self.execute("SELECT count() FROM system.processes WHERE query_id = %(q)s", {"q": query_id})[0][0]:
                    if log is not None:
                        log.info("The server at %s runs query %s (started over HTTP): it goes on without this "
                                 "process", where, query_id)
                    return False
                now = time.monotonic()
                if now - sent > limit:
                    self.kill_query(query_id)
                    raise LoadError(
                        f"ClickHouse at {where} did not list query {query_id} in system.processes within "
                        f"{limit:.0f} s of its HTTP request; killed it"
                    )
                if log is not None and now - last >= log_every:
                    last = now
                    log.info("The server at %s has not started query %s yet, %.0f s after it was sent (under a "
                             "workload, it waits for admission): waiting for it before deferring", where, query_id,
                             now - sent)
        finally:
            conn.close()

    def _http_outcome(self, conn: Any, where: str) -> bool:
        """The HTTP insert's response, when it came before the query was seen running: True when it
        finished; the server's error otherwise."""
        try:
            response = conn.getresponse()
            body = response.read(65536).decode(errors="replace")
        except OSError as exc:
            raise ClickHouseUnavailableError(f"ClickHouse's HTTP interface at {where} dropped the request ({exc})") from exc
        code = response.getheader("X-ClickHouse-Exception-Code")
        if response.status == 200 and not code:
            return True
        text = body.split("Stack trace:")[0].strip() or f"HTTP {response.status} {response.reason}"
        return_code = int(code) if code and code.isdigit() else 0
        raise self.server_error(return_code, text)

    # ------------------------------------------------------------------ tables
    def table_comment(self, table: TableRef) -> str | None:
        """The table's comment ('' when none); None when the table does not exist."""
        rows = self.execute(
            "SELECT comment FROM system.tables WHERE database = %(d)s AND name = %(t)s",
            {"d": table.database or self.database, "t": table.name},
        )
        return str(rows[0][0]) if rows else None

    def partitions(self, table: TableRef) -> list[tuple[str, str]]:
        """(partition_id, partition) of the table's active parts that hold rows (a partition moved
        away leaves an empty active part behind for a while: it is no partition of the data)."""
        rows = self.execute(
            "SELECT partition_id, any(partition) FROM system.parts WHERE database = %(d)s AND table = %(t)s "
            "AND active AND rows > 0 GROUP BY partition_id ORDER BY partition_id",
            {"d": table.database or self.database, "t": table.name},
        )
        return [(str(pid), str(value)) for pid, value in rows]

    # ------------------------------------------------------------------ profile
    def get_profile(
        self, table: TableRef, cluster: str | None = None, *, missing: TableInfo | None = None,
        workload: str | None = None,
    ) -> ServerProfile:
        """What the planner needs: version, cores, memory, cluster nodes, the target table. Every probe
        has a fallback (deployments differ): a missing system table never fails the load.

        :param table: the target table (its database defaults to the connection's).
        :param cluster: the cluster for distributed loads (default: connection extra ``cluster``).
        :param missing: the table to plan with when the target does not exist (one the load will create);
            without it a missing target is a :class:`TableError`.
        :param workload: the load's workload (None: the connection's extra; ``""``: none): the nodes'
            workloads and resources are read only when there is one.
        """
        cluster = cluster or self.cluster
        nodes = self.cluster_nodes(cluster) if cluster else []
        cores = self._cores(self.client())
        workload_nodes = self.workload_nodes(nodes) if (self.workload if workload is None else workload) else []
        memory, memory_source = self._first(MEMORY_PROBES, self.client())
        return ServerProfile(
            version=str(self.execute("SELECT version()")[0][0]),
            cores=cores,
            memory_bytes=int(memory or 0),
            memory_source=memory_source or "unknown",
            region=self.region,
            cluster=cluster,
            nodes=nodes,
            node_cores=[self._cores(client, cores) for _, client in self.node_clients(nodes)] if len(nodes) > 1 else [cores],
            table=missing if missing is not None and self.table_comment(table) is None else self.table_info(table),
            workload=self.workload,
            workload_nodes=workload_nodes,
        )

    def workload_nodes(self, nodes: Sequence[ClusterNode] = ()) -> list[NodeWorkloads]:
        """Each node's workloads and resources (workload scheduling): the connection's node, and every node
        of the cluster; one read of ``system.workloads`` and ``system.resources`` on each. A node that cannot
        be read (a server without them, a missing grant, a node the worker cannot reach) is listed with its
        error: the plan decides what that means."""
        out = []
        if not any(n.is_local for n in nodes):
            out.append(self._workloads_on(self.address, self.client(), initiator=True, member=False))
        for node in nodes:
            client = self.client() if node.is_local else self.client_for(node.host, node.port)
            out.append(self._workloads_on(node.address, client, initiator=node.is_local, member=True))
        return out

    def _workloads_on(self, address: str, client: Client, *, initiator: bool, member: bool) -> NodeWorkloads:
        try:
            (workloads, resources), = client.execute(WORKLOADS_SQL)
        except ch_errors.ServerException as exc:
            if classify_server_error(exc.code).kind == "auth":
                raise self.translate_error(exc) from exc
            error = str(exc.message).split("Stack trace:")[0].strip()
            return NodeWorkloads(node=address, initiator=initiator, member=member, error=error)
        except Exception as exc:
            translated = self.translate_error(exc)
            if initiator or not isinstance(translated, ClickHouseUnavailableError):
                raise translated from exc
            return NodeWorkloads(node=address, initiator=initiator, member=member, error=str(translated))
        return NodeWorkloads(
            node=address, initiator=initiator, member=member,
            workloads=[WorkloadEntity(name=n, parent=p, create_query=q) for n, p, q in workloads],
            resources=[WorkloadEntity(name=n, create_query=q) for n, q in resources],
        )

    def _first(self, probes: Sequence[tuple[str, str]], client: Client) -> tuple[Any, str]:
        """The first value the first probe that works returns, and its label; (None, '') when none works."""
        for sql, label in probes:
            try:
                rows = client.execute(sql)
            except ch_errors.ServerException as exc:
                if classify_server_error(exc.code).kind == "auth":
                    raise self.translate_error(exc) from exc
                continue  # a system table this deployment lacks: the next probe
            except Exception as exc:
                raise self.translate_error(exc) from exc
            if rows and rows[0][0] not in (None, ""):
                return rows[0][0], label
        return None, ""

    def _cores(self, client: Client, fallback: int | None = None) -> int:
        """A node's cores; a node that does not answer counts as ``fallback`` (the initiator's) when given."""
        try:
            value, _ = self._first(CORES_PROBES, client)
        except ClickHouseUnavailableError:
            if fallback is None:
                raise
            return fallback
        return max(1, parse_int_setting(value) or 1)

    def cluster_nodes(self, cluster: str) -> list[ClusterNode]:
        """The cluster's replicas from ``system.clusters``; :class:`ClusterError` when it is not there."""
        nodes = self.rows(
            ClusterNode, "SELECT host_name AS host, port, shard_num, replica_num, is_local FROM system.clusters "
            "WHERE cluster = %(c)s ORDER BY shard_num, replica_num", {"c": cluster},
        )
        if not nodes:
            known = [r[0] for r in self.execute("SELECT DISTINCT cluster FROM system.clusters")]
            raise ClusterError(
                f"cluster {cluster!r} is not in system.clusters (known: {', '.join(known) or 'none'}); "
                "fix the operator's cluster argument or the connection extra 'cluster'"
            )
        return nodes

    def table_info(self, table: TableRef) -> TableInfo:
        """The target's engine, keys, database engine, dependent views and, for a Distributed table, what it
        points at; :class:`TableError` when it does not exist."""
        database = table.database or self.database
        rows = self.execute(TABLE_INFO_SQL, {"d": database, "t": table.name})
        if not rows:
            raise TableError(
                f"table {database}.{table.name} does not exist on {self.address}; "
                "create it, or pass create_table='if_missing' with order_by=… to create it from the files' columns, "
                "or fix the table argument"
            )
        info = table_info(database, table.name, *rows[0][:4])
        info.database_engine, info.dependent_views = rows[0][4] or None, list(rows[0][5])
        if info.local_database and info.local_table:
            local = self.execute(
                "SELECT engine FROM system.tables WHERE database = %(d)s AND name = %(t)s",
                {"d": info.local_database, "t": info.local_table},
            )
            info.local_engine = local[0][0] if local else None
        return info
