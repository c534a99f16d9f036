"""Starting an insert over ClickHouse's HTTP interface, for a deferrable load: the server runs it on without
the process that started it (the native protocol's server aborts a query whose client left)."""

from __future__ import annotations

import http.client
import logging
import select
import ssl
import time
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlencode

from tenacity import RetryCallState

from airflow_provider_s3ch.core.deferral import http_params
from airflow_provider_s3ch.core.errors import server_text
from airflow_provider_s3ch.errors import ClickHouseUnavailableError, InvalidRequestError, LoadError
from airflow_provider_s3ch.hooks.clickhouse import HTTP_CONN_TYPE, HTTP_PORTS
from airflow_provider_s3ch.hooks.query_log import is_listed, kill_query, poll

if TYPE_CHECKING:
    from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook


def http_endpoint(hook: ClickHouseHook) -> tuple[str, int, bool]:
    """(host, port, secure) of the server's HTTP interface: the connection's extra ``http_port``, else the
    port of a ``clickhouse`` (HTTP) connection, else 8443 with ``secure`` and 8123 without."""
    conn = hook.connection
    extra = dict(conn.extra_dejson or {})
    secure = hook.secure
    value = extra.get("http_port")
    if value in (None, ""):
        port = int(conn.port) if conn.conn_type == HTTP_CONN_TYPE and conn.port else HTTP_PORTS[1 if secure else 0]
        return hook.host, port, secure
    try:
        return hook.host, int(value), secure
    except (TypeError, ValueError):
        raise InvalidRequestError(
            f"connection {hook.clickhouse_conn_id!r}: extra 'http_port' is {value!r}, not a port number; set it "
            f"to the server's HTTP port ({HTTP_PORTS[0]}, {HTTP_PORTS[1]} with TLS)"
        ) from None


class ConfirmWait(NamedTuple):
    """How :func:`start_insert_http` waits for the server to list the query it sent."""

    #: How long to wait (it may wait for admission); None: the connection's ``send_receive_timeout`` (3600 s),
    #: as long as a native query may go silent.
    timeout: float | None = None
    #: Seconds between two looks at ``system.processes`` in the first 5 s (then 1 s).
    interval: float = 0.1
    #: Seconds between two log lines while the server has not listed the query.
    log_every: float = 30.0


#: The wait a deferrable load's start uses.
CONFIRM_WAIT = ConfirmWait()


def _connection(hook: ClickHouseHook, options: dict[str, Any]) -> tuple[http.client.HTTPConnection, str]:
    """A connection to the server's HTTP interface (TLS with ``secure``, verified unless ``verify`` is false), and
    its ``host:port``."""
    host, port, secure = http_endpoint(hook)
    timeout = float(options.get("connect_timeout") or 10)
    if not secure:
        return http.client.HTTPConnection(host, port, timeout=timeout), f"{host}:{port}"
    context = ssl.create_default_context(cafile=options.get("ca_certs") or None)
    if options.get("verify") is False:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return http.client.HTTPSConnection(host, port, timeout=timeout, context=context), f"{host}:{port}"


def start_insert_http(
    hook: ClickHouseHook, sql: str, *, query_id: str, settings: dict[str, Any] | None = None,
    log: logging.Logger | None = None, wait: ConfirmWait = CONFIRM_WAIT,
) -> bool:
    """Start the load over the server's HTTP interface under ``query_id`` and return once the server runs
    it, without waiting for its end: the server goes on with an HTTP query whose client went away, so the
    load outlives this process.

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
    :param wait: how long and how often to look for the query in ``system.processes``.
    :return: True when the server had already finished the load before it was seen running (a short
        load); False when it runs.
    :raises S3chError: the server refused or failed the statement (by its code, as over the native
        protocol), or did not answer (:class:`ClickHouseUnavailableError`), or did not list the query in
        time (:class:`LoadError`; the query is killed).
    """
    options = hook.client_options
    path = "/?" + urlencode(http_params(query_id, hook.database, dict(settings or {})))
    headers = {
        "X-ClickHouse-User": hook.login,
        "X-ClickHouse-Key": str(options.get("password") or ""),
        "Content-Type": "text/plain; charset=UTF-8",
    }
    conn, where = _connection(hook, options)
    try:
        try:
            conn.request("POST", path, body=sql.encode(), headers=headers)
        except OSError as exc:
            raise ClickHouseUnavailableError(
                f"ClickHouse's HTTP interface at {where} did not answer ({exc}); a deferrable load starts its "
                f"insert over HTTP: set the extra 'http_port' of connection {hook.clickhouse_conn_id!r} to the "
                "server's HTTP port"
            ) from exc
        sent = time.monotonic()
        limit = float(wait.timeout if wait.timeout is not None else options.get("send_receive_timeout") or 3600)

        def look() -> bool | None:
            """The server's answer (True: finished), False once it lists the query, None while neither.
            The wait is the socket's: every ``wait.interval`` at first, then every second (admission may be long)."""
            pause = wait.interval if time.monotonic() - sent < 5 else 1.0
            readable, _, _ = select.select([conn.sock], [], [], pause)
            if readable:
                return _http_outcome(hook, conn, where)
            return False if is_listed(hook, query_id) else None

        logged = [sent]

        def waiting(state: RetryCallState) -> None:
            now = time.monotonic()
            if log is not None and now - logged[0] >= wait.log_every:
                logged[0] = now
                log.info("The server at %s has not started query %s yet, %.0f s after it was sent (under a "
                         "workload, it waits for admission): waiting for it before deferring", where, query_id,
                         now - sent)

        outcome = poll(limit, 0, until=lambda answer: answer is not None, on_wait=waiting)(look)
        if outcome is None:
            kill_query(hook, query_id)
            raise LoadError(
                f"ClickHouse at {where} did not list query {query_id} in system.processes within "
                f"{limit:.0f} s of its HTTP request; killed it"
            )
        if not outcome and log is not None:
            log.info("The server at %s runs query %s (started over HTTP): it goes on without this process",
                     where, query_id)
        return outcome
    finally:
        conn.close()


def _http_outcome(hook: ClickHouseHook, conn: Any, where: str) -> bool:
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
    text = server_text(body) or f"HTTP {response.status} {response.reason}"
    return_code = int(code) if code and code.isdigit() else 0
    raise hook.server_error(return_code, text)
