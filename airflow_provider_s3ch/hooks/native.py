"""clickhouse-driver's client, less one round trip per statement.

Before every query on an open connection the driver pings the server and waits for its pong, so that a
connection the server or the network dropped is opened again instead of failing the query. A task sends
its statements back to back: a connection that answered a moment ago is alive, and the ping doubles each
statement's round trips (10 ms more per statement with a server 10 ms away; the benchmarks' "ClickHouse
across a network" figures, docs/benchmarks.md). The provider's clients skip the ping on a connection that
received a packet within :data:`PING_AFTER_IDLE_S`; one idle for longer is pinged first, as the driver does.
"""

from __future__ import annotations

import time
from typing import Any

from clickhouse_driver import Client
from clickhouse_driver.connection import Connection

#: A connection that received a packet within this many seconds is taken as alive: no ping before the query.
#: Far below the idle timeouts that drop a connection (the server's ``idle_connection_timeout``, 3600 s by
#: default; load balancers' minutes).
PING_AFTER_IDLE_S = 5.0


class RecentConnection(Connection):
    """A native connection that pings before a query only after :data:`PING_AFTER_IDLE_S` without a packet."""

    #: ``time.monotonic()`` of the last packet received (0: none yet).
    last_packet = 0.0

    def receive_packet(self) -> Any:
        packet = super().receive_packet()
        self.last_packet = time.monotonic()
        return packet

    def force_connect(self) -> None:
        if self.connected and time.monotonic() - self.last_packet < PING_AFTER_IDLE_S:
            self.check_query_execution()  # what the driver's own path does first: one query at a time
            return
        super().force_connect()


def native_client(host: str, port: int, **kwargs: Any) -> Client:
    """A ``clickhouse_driver.Client`` whose connections are :class:`RecentConnection`\\ s."""
    client = Client(host, port=port, **kwargs)
    for connection in [client.connection, *client.connections]:  # the one in use, and the alternates
        connection.__class__ = RecentConnection
    return client
