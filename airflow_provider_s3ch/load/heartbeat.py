"""A ledger load's heartbeat: the proof that the load holding claims is alive (docs/ledger.md, "Claims").

The first beat is written before the load's claims, through the load's own connection; then a thread beside
the load writes one every ``interval`` seconds through a connection of its own, until the load ends. Each
beat is a row of the ledger's heartbeat table with the window it vouches for; the server stamps its time, so
the workers' clocks do not matter. Other loads take a claim as stale once its load runs nothing, has no
staging table and its last beat is older than the window
(:func:`~airflow_provider_s3ch.core.ledger_rows.row_status`).

The load itself trusts its claims only while no gap between its beats (from the start of one successful
write to the start of the next, or to now) exceeded half the window: :meth:`Heartbeat.fresh`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.ledger import HEARTBEAT_WINDOW_BEATS
from airflow_provider_s3ch.core.ledger_sql import render_write_heartbeat
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook

#: Settings of a beat: stored and visible when the INSERT returns.
BEAT_SETTINGS = {"insert_deduplicate": 0, "async_insert": 0}


class Heartbeat:
    """The heartbeat of one load.

    :param hook: the load's ClickHouse connection (the first beat; the thread opens a client of its own).
    :param ledger: the ledger table (its heartbeat table is written).
    :param load_id: the load.
    :param interval: seconds between two beats.
    :param log: the task's logger.
    """

    def __init__(self, hook: ClickHouseHook, ledger: TableRef, load_id: str, interval: float,
                 log: logging.Logger) -> None:
        if not interval > 0:
            raise InvalidRequestError(f"claim_heartbeat must be a positive number of seconds, not {interval!r}")
        self.hook, self.ledger, self.load_id, self.log = hook, ledger, load_id, log
        self.interval = float(interval)
        #: Seconds a beat vouches for the load's claims.
        self.window = self.interval * HEARTBEAT_WINDOW_BEATS
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: When the last successful beat (or claim) was sent (``time.monotonic()``), and whether a gap since
        #: the claims were confirmed was longer than half the window.
        self._last = 0.0
        self._lapsed = False

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Write the first beat (before the claims; its failure fails the load before it claims anything) and
        start the thread that writes the next ones."""
        if self._thread is not None:
            return
        sent = time.monotonic()
        self._send(None)
        self.renewed(sent)
        self._thread = threading.Thread(target=self._run, name=f"s3ch-heartbeat-{self.load_id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (the load ended: its claims are loaded, released, or judged by its staging table)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval + 5)
        self._thread = None

    def fresh(self) -> bool:
        """Whether the load may still count on its claims: no gap between beats, and none since the last one,
        longer than half the window. True while no heartbeat runs (nothing held, or a dry run)."""
        if self._thread is None:
            return True
        with self._lock:
            return not self._lapsed and time.monotonic() - self._last <= self.window / 2

    def renewed(self, sent: float) -> None:
        """The load's claims were written (and confirmed) at ``sent`` (``time.monotonic()`` when the write
        started): a sign of life as good as a beat, after which earlier gaps no longer matter."""
        with self._lock:
            self._last, self._lapsed = max(self._last, sent), False

    def _beaten(self, sent: float) -> None:
        with self._lock:
            if sent - self._last > self.window / 2:
                self._lapsed = True
            self._last = max(self._last, sent)

    def _send(self, client: Any) -> None:
        self.hook.execute(render_write_heartbeat(self.ledger), [(self.load_id, self.window)], settings=BEAT_SETTINGS,
                          client=client)

    def _run(self) -> None:
        client = None
        try:
            while not self._stop.wait(self.interval):
                sent = time.monotonic()
                try:
                    client = client or self.hook.client_for(self.hook.host, self.hook.port, fresh=True)
                    self._send(client)
                except Exception as exc:  # noqa: BLE001 - a missed beat: the load re-confirms its claims
                    self.log.warning("Ledger: could not write the heartbeat of %s: %s", self.load_id, exc)
                    if client is not None:
                        with contextlib.suppress(Exception):
                            client.disconnect()
                    client = None
                    continue
                self._beaten(sent)
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.disconnect()
