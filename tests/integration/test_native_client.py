"""The provider's native clients (hooks/native.py) on the real local stack: no ping before a statement on a
connection that just answered; the driver's ping, and its reconnection, on one idle for longer."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from clickhouse_driver.connection import Connection

from airflow_provider_s3ch.hooks import native
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local import LocalStack

pytestmark = pytest.mark.integration


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each ping clickhouse-driver's connections send, with its answer (the driver's own ping, counted)."""
    sent: list[bool] = []
    ping = Connection.ping

    def counted(self: Connection) -> bool:
        answered = ping(self)
        sent.append(bool(answered))
        return answered

    monkeypatch.setattr(Connection, "ping", counted)
    return sent


@pytest.fixture
def hook(stack: LocalStack) -> Iterator[ClickHouseHook]:
    one = ClickHouseHook()
    yield one
    one.close()


def test_statements_back_to_back_go_without_a_ping(hook: ClickHouseHook, pings: list[bool]) -> None:
    answers = [hook.execute("SELECT %(n)s + 1", {"n": n})[0][0] for n in range(5)]
    assert answers == [1, 2, 3, 4, 5]
    assert pings == []  # the first statement connected; the others followed an answer


def test_an_idle_connection_is_pinged_and_one_the_server_dropped_is_opened_again(
    hook: ClickHouseHook, pings: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert hook.execute("SELECT 1")[0][0] == 1
    monkeypatch.setattr(native, "PING_AFTER_IDLE_S", 0.0)  # every connection counts as idle
    assert hook.execute("SELECT 2")[0][0] == 2
    assert pings == [True]
    # The connection breaks while idle (a server restart, a load balancer's timeout): the ping finds out and
    # the driver connects again before the statement, as it does for every statement without the provider.
    hook.client().connection.socket.shutdown(socket.SHUT_RDWR)
    assert hook.execute("SELECT 3")[0][0] == 3
    assert pings == [True, False]
