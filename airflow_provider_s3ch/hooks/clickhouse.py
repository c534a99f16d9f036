"""ClickHouseHook: the native-protocol connection to ClickHouse (clickhouse-driver), and Airflow's SQL hook.

Connection (clients cached per node, closed; :mod:`.native`'s), execute, typed rows, the native insert, and error
translation by the core's code table. It makes no decision. The server's facts are read by :mod:`.server`, the
load's queries followed and killed by :mod:`.query_log`, a deferrable insert started by :mod:`.http_insert`.

A :class:`~airflow.providers.common.sql.hooks.sql.DbApiHook` over ``clickhouse_driver.dbapi`` for the
``clickhouse_native`` type: ``SQLExecuteQueryOperator``, the SQL sensors, ``get_records``, ``get_df`` work.
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
from airflow_provider_s3ch.compat import ConnectionForm
from airflow_provider_s3ch.core.errors import bad_file, classify_server_error, is_query_memory_limit, server_text
from airflow_provider_s3ch.core.rows_out import data_fix, quotes_data
from airflow_provider_s3ch.core.server_models import ClusterNode
from airflow_provider_s3ch.core.server_sql import TEST_CONNECTION_SQL, WHO_AM_I_SQL
from airflow_provider_s3ch.errors import (
    ClickHouseAuthError,
    ClickHouseQueryError,
    ClickHouseUnavailableError,
    InvalidRequestError,
    LoadError,
    QueryMemoryLimitError,
    S3AccessDeniedError,
    S3chError,
    TableError,
)
from airflow_provider_s3ch.hooks.native import native_client
from airflow_provider_s3ch.hooks.quiet import quiet_loggers

DEFAULT_PORT = 9000
DEFAULT_SECURE_PORT = 9440
#: The connection type of Apache Airflow's own ClickHouse provider (HTTP): its ``port`` is the HTTP
#: port, so the native port comes from the extra ``native_port`` or the default for ``secure``.
HTTP_CONN_TYPE = "clickhouse"
HTTP_PORTS = (8123, 8443)
_CLIENT_EXTRA_KEYS = ("connect_timeout", "send_receive_timeout", "sync_request_timeout", "compression", "verify",
                      "ca_certs")
Row = TypeVar("Row", bound=BaseModel)


def _true(value: Any) -> bool:
    """A connection extra's boolean: JSON ``true`` or the strings 1/true/yes/on."""
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


#: Client options that arrive as text from a connection URI's query string.
_CLIENT_EXTRA_TYPES: dict[str, Any] = {
    "connect_timeout": float, "send_receive_timeout": float, "sync_request_timeout": float, "verify": _true,
}


class ClickHouseHook(ConnectionForm, DbApiHook):
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

    :meth:`get_conn` is DB-API 2.0 (``clickhouse_driver.dbapi``) for Airflow's SQL operators and sensors;
    :meth:`client` and :meth:`client_for` are native clients. Airflow 2's connection form: ConnectionForm.

    :param clickhouse_conn_id: the Airflow connection id.
    :param schema: a database other than the connection's, for unqualified names.
    """

    conn_name_attr = "clickhouse_conn_id"
    default_conn_name = "clickhouse_native_default"
    conn_type = NATIVE_CONN_TYPE
    hook_name = "ClickHouse (native protocol)"
    supports_autocommit = True  # every statement commits on its own: there is nothing to commit
    _test_connection_sql = TEST_CONNECTION_SQL

    def __init__(self, clickhouse_conn_id: str = default_conn_name, *, schema: str | None = None, **kw: Any) -> None:
        # Airflow's SQL operators pass the connection's extras as keyword arguments: DbApiHook ignores them.
        super().__init__(clickhouse_conn_id=clickhouse_conn_id, schema=schema, **kw)
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
        self.secure = secure = _true(extra.get("secure", False))
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
            **{key: _CLIENT_EXTRA_TYPES.get(key, lambda v: v)(extra[key])
               for key in _CLIENT_EXTRA_KEYS if extra.get(key) not in (None, "")},
        }

    def _native_port(self, conn_type: str | None, port: int | None, extra: dict[str, Any], secure: bool) -> int:
        """The native protocol's port: the connection's own, except on an HTTP (``clickhouse``) connection."""
        default = DEFAULT_SECURE_PORT if secure else DEFAULT_PORT
        if conn_type != HTTP_CONN_TYPE:
            return int(port) if port else default
        native_port = extra.get("native_port")
        if native_port in (None, ""):
            self.log.info("Connection %r is of type %r (HTTP, port %s): the native protocol's port is %d (%s); "
                          "set the extra 'native_port' for another", self.clickhouse_conn_id, conn_type, port,
                          default, "secure" if secure else "not secure")
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
        return dbapi.connect(host=self.host, port=self.port, user=self.login,
                             password=self._client_kwargs["password"], database=self.database, **kwargs)

    def set_autocommit(self, conn: Any, autocommit: bool) -> None:
        """Nothing to set: ClickHouse has no transactions."""

    def get_autocommit(self, conn: Any) -> bool:
        """Always: ClickHouse has no transactions."""
        return True

    def test_connection(self) -> tuple[bool, str]:
        """Log in and ask the server who it is (Airflow's connection test); the message names the problem."""
        client = self.client_for(self.host, self.port, fresh=True)
        try:
            rows = client.execute(WHO_AM_I_SQL)
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
    @property
    def client_options(self) -> dict[str, Any]:
        """The native clients' options (user, password, timeouts, TLS): what the HTTP interface reuses."""
        return dict(self._client_kwargs)

    def client(self) -> Client:
        """The cached native ``clickhouse_driver.Client`` on the connection's host."""
        return self.client_for(self.host, self.port)

    def client_for(self, host: str, port: int, *, fresh: bool = False) -> Client:
        """A client on a node of the cluster, with this connection's credentials; cached unless ``fresh``."""
        if fresh:
            return native_client(host, port, **self._client_kwargs)
        if (host, port) not in self._clients:
            self._clients[(host, port)] = native_client(host, port, **self._client_kwargs)
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
        code, conn = getattr(exc, "code", None), self.clickhouse_conn_id
        raw = str(getattr(exc, "message", None) or exc)
        text = server_text(raw)
        if isinstance(exc, ch_errors.Error) and quotes_data(raw):  # the driver's error, chained to ours, too
            exc.message, exc.args = text, (text,)
        if isinstance(exc, ch_errors.NetworkError | ch_errors.SocketTimeoutError | OSError | EOFError):
            return ClickHouseUnavailableError(f"ClickHouse at {self.address} did not answer ({text}); check host "
                                              f"and port of connection {conn!r} and that the server runs")
        kind, hint = classify_server_error(code, raw)  # the server's own words: the memory limits' markers
        message = f"ClickHouse error {code} ({hint}): {text}" if code else f"ClickHouse error: {text}"
        if kind == "auth":
            return ClickHouseAuthError(f"ClickHouse at {self.address} refused user {self.login!r}: wrong user or "
                                       f"password; fix the login and password of connection {conn!r}")
        if kind == "unknown_table":
            return TableError(f"ClickHouse: {text}")
        if kind == "s3_refused":  # the load names the credentials the server read with (core.access.with_hint)
            return S3AccessDeniedError(message)
        if kind == "terminal" and is_query_memory_limit(code, raw):
            return QueryMemoryLimitError(f"{message}; retrying with the same plan would fail the same way")
        if kind == "terminal":  # the file whose data the server could not read is named (on_bad_file='set_aside')
            fix, bad = data_fix(raw, self.s3_endpoint_url), bad_file(code, raw)
            return ClickHouseQueryError(f"{message}; retrying would fail the same way: {fix}", bad_file=bad)
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
        started, running, settings = time.monotonic(), False, settings or {}
        last = started
        try:
            with quiet_loggers("clickhouse_driver"):
                progress = self.client().execute_with_progress(sql, settings=settings, query_id=query_id)
                for rows, total in progress:
                    if log is not None and not running:
                        running = True
                        log.info("The server runs the load: its first progress came %.1f s after the statement "
                                 "was sent%s", time.monotonic() - started,
                                 " (after the wait for the workload's admission)" if "workload" in settings else "")
                    if log is not None and time.monotonic() - last >= log_every:
                        last = time.monotonic()
                        log.info("Progress: %d rows read%s", rows, f" of {total}" if total else "")
                progress.get_result()
        except Exception as exc:
            raise self.translate_error(exc) from exc

    def server_error(self, code: int, text: str) -> S3chError:
        """The provider's error for a server error known by its code and text (the HTTP interface's, or a
        failed query's ``system.query_log`` entry), by the same table as the native protocol's errors."""
        return self.translate_error(ch_errors.ServerException(text, code))
