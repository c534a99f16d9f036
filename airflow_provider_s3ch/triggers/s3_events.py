"""S3ListingEventTrigger: an asset watcher's trigger that polls an S3 listing and hands on the new files.

Each look lists the glob's literal prefix from a cursor (S3's ``StartAfter``, where keys sort by their
arrival) or, every ``full_listing_every`` looks, from the prefix itself (the backstop: a key that sorts
before the cursor, a file the cursor went past, an event a run consumed and failed on for good come back
there). The matching files not yet handed on become events of at most
:data:`~airflow_provider_s3ch.core.events.MAX_FILES_PER_EVENT` files each
(:class:`~airflow_provider_s3ch.core.events.EventPayload`); Airflow stores each as an asset event, and an
operator with ``files_from="events"`` loads the files they name, the file ledger deciding what is new.

The trigger's keyword arguments are its identity (Airflow's ``BaseEventTrigger.hash``), so no cursor is
among them: on Airflow 3.3 the cursor lives in the watched asset's state store (``asset_state_store``),
elsewhere in memory; a trigger started afresh lists from the prefix, and the files it hands on again are
ones the ledger already holds (harmless). The listing is boto3's, blocking: it runs in a thread.

A bucket that does not exist, or may not be listed, fails the trigger with an error that names the watcher, the
bucket and the fix (Airflow's triggerer logs it, and starts the trigger again: :class:`Restarts`); S3 failing for
now (throttling, a server error, the network) is logged and looked at again. A prefix with nothing under it is
"nothing yet": the trigger says once, when it starts, what it watches, so that a typo shows in the triggerer's log.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import warnings
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass, field
from typing import Any

from airflow.triggers.base import TriggerEvent
from packaging.version import Version

from airflow_provider_s3ch.compat import AIRFLOW, AssetWatcher, BaseEventTrigger
from airflow_provider_s3ch.core.events import MAX_FILES_PER_EVENT, EventFile, EventPayload, key_filter, payloads
from airflow_provider_s3ch.core.glob import literal_prefix
from airflow_provider_s3ch.core.models import LoadRequest, bucket_of, key_pattern_of
from airflow_provider_s3ch.errors import S3chTerminalError, S3chTransientError, in_place_of, provider_errors, require
from airflow_provider_s3ch.hooks.s3 import list_pages
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.hooks.sqs import MAX_BACKOFF

#: The oldest Airflow with asset watchers.
WATCHERS_SINCE = "3.0"
#: The oldest Airflow with the asset state store (the listing watcher's cursor) and the shared-stream ack mode.
STATE_AND_ACK_SINCE = "3.3"


def missing_pieces(watcher: str, airflow: Version) -> str | None:
    """What a watcher lacks on this Airflow (3.0 to 3.2), said once when the DAG is parsed; None on 3.3 and later.

    :param watcher: ``"listing"`` or ``"notification"``.
    :param airflow: the running Airflow's version.
    """
    if airflow >= Version(STATE_AND_ACK_SINCE):
        return None
    if watcher == "listing":
        return (f"Airflow {airflow} has no asset state store (Airflow {STATE_AND_ACK_SINCE}): the listing watcher's "
                "cursor is kept in memory, and a restarted triggerer lists the whole prefix once (docs/continuous.md)")
    return (f"Airflow {airflow} has no shared-stream ack mode (Airflow {STATE_AND_ACK_SINCE}): the notification "
            "watcher deletes a batch's messages once the triggerer took its event, so a triggerer that dies before "
            "storing it loses that event; give the asset the listing watcher too, as the backstop "
            "(docs/continuous.md)")


class Restarts:
    """Airflow's triggerer starts a watcher's trigger that failed again at its next check, about a second later, for
    as long as the asset is watched; until the mistake is fixed each start fails the same way. So a trigger that
    starts after failing for good waits first: 1 s after the first failure, doubling up to
    :data:`~airflow_provider_s3ch.hooks.sqs.MAX_BACKOFF` (60 s), so that the triggerer's log shows the error once a
    minute at most and S3 or SQS is not called every second. A watcher that gets through (a listing, a delete)
    forgets its failures, as does one that last failed over two minutes ago; one whose queue, bucket or permission
    is fixed picks up by itself. Kept in the triggerer's process, by the trigger's identity (a key the caller
    gives)."""

    def __init__(self) -> None:
        #: key -> (failures in a row, when the last one was, its message)
        self._failed: dict[Hashable, tuple[int, float, str]] = {}

    def pause(self, key: Hashable) -> float:
        """Seconds to wait before the first call: 0 unless the last start of ``key`` failed for good lately."""
        count, when, _ = self._failed.get(key, (0, 0.0, ""))
        if not count or time.monotonic() - when > 2 * MAX_BACKOFF:
            return 0.0
        return min(MAX_BACKOFF, 2.0 ** (count - 1))

    async def wait(self, key: Hashable, what: str, logger: Any) -> None:
        """Wait :meth:`pause` seconds, saying so in ``logger``'s log."""
        if pause := self.pause(key):
            count, _, error = self._failed[key]
            logger.warning("%s: next try in %.0f s, after %d failure(s) in a row; the last: %s", what, pause, count,
                           error)
            await asyncio.sleep(pause)

    def failed(self, key: Hashable, error: BaseException) -> None:
        """``key`` failed for good with ``error``."""
        count = self._failed[key][0] if self.pause(key) else 0
        self._failed[key] = (count + 1, time.monotonic(), str(error))

    def succeeded(self, key: Hashable) -> None:
        """``key`` got through (a listing, a delete): its failures are forgotten (also 2 minutes after the last)."""
        self._failed.pop(key, None)


#: The watchers' failures, in this (the triggerer's) process.
RESTARTS = Restarts()


@dataclass
class Cursor:
    """Where the trigger is: the last key listed (``StartAfter`` of the next look, where keys sort by arrival),
    the looks made, and the files (key -> ETag) handed on in this trigger's life."""

    start_after: str | None = None
    looks: int = 0
    emitted: dict[str, str] = field(default_factory=dict)

    def stored(self) -> dict[str, Any]:
        """What the state store keeps (the handed-on files stay in memory: they grow with the bucket)."""
        return {"start_after": self.start_after, "looks": self.looks}


@dataclass(frozen=True)
class Look:
    """One look's answer: the new files, whether the listing was full, the last key listed, the S3 calls."""

    files: list[EventFile]
    full: bool
    last_key: str | None
    calls: int


class S3ListingEventTrigger(BaseEventTrigger):
    """Poll ``s3_uri``'s listing every ``poll_interval`` seconds and yield the new matching files as events.

    :param s3_uri: ``s3://bucket/glob``, the operator's own: the files are those ClickHouse's ``s3()`` reads.
    :param aws_conn_id: the ``aws`` connection that lists the bucket.
    :param poll_interval: seconds between two looks.
    :param full_listing_every: every this many looks, list the whole prefix (the backstop); 1 lists it always. The
        default, 360, is an hour at a 10 s poll: one full listing an hour (docs/continuous.md, the cost).
    :param keys_sort_by_arrival: new keys sort after the ones before them (a time-stamped name): a look lists
        only the keys after the last one listed (S3's ``StartAfter``).
    :param max_files_per_event: the most files one event names (at most
        :data:`~airflow_provider_s3ch.core.events.MAX_FILES_PER_EVENT`).
    """

    def __init__(
        self,
        *,
        s3_uri: str,
        aws_conn_id: str | None = "aws_default",
        poll_interval: float = 10.0,
        full_listing_every: int = 360,
        keys_sort_by_arrival: bool = False,
        max_files_per_event: int = MAX_FILES_PER_EVENT,
    ) -> None:
        super().__init__()
        with provider_errors():
            LoadRequest._uri(s3_uri)
        self.s3_uri = s3_uri
        self.aws_conn_id = aws_conn_id
        self.poll_interval = float(poll_interval)
        self.full_listing_every = max(1, int(full_listing_every))
        self.keys_sort_by_arrival = bool(keys_sort_by_arrival)
        self.max_files_per_event = max(1, min(int(max_files_per_event), MAX_FILES_PER_EVENT))
        self.cursor = Cursor()
        self._source: S3Source | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "s3_uri": self.s3_uri,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
                "full_listing_every": self.full_listing_every,
                "keys_sort_by_arrival": self.keys_sort_by_arrival,
                "max_files_per_event": self.max_files_per_event,
            },
        )

    @property
    def bucket(self) -> str:
        return bucket_of(self.s3_uri)

    # ------------------------------------------------------------------ the cursor's home
    @property
    def _store_key(self) -> str:
        return "s3ch.listing:" + hashlib.sha256(self.s3_uri.encode()).hexdigest()[:16]

    async def _load_cursor(self) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:  # aget/aset from Airflow 3.3.2; 3.3.0 and 3.3.1 have the blocking get/set only
            if hasattr(store, "aget"):
                saved = await store.aget(self._store_key, default=None)
            else:
                saved = await asyncio.to_thread(store.get, self._store_key, default=None)
        except ValueError:  # more than one watched asset: no single store
            return
        if isinstance(saved, dict):
            self.cursor.start_after = saved.get("start_after") or None
            self.cursor.looks = int(saved.get("looks") or 0)

    async def _save_cursor(self) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:
            if hasattr(store, "aset"):
                await store.aset(self._store_key, self.cursor.stored())
            else:
                await asyncio.to_thread(store.set, self._store_key, self.cursor.stored())
        except ValueError:
            return

    # ------------------------------------------------------------------ one look
    def look(self) -> Look:
        """One look at S3 (blocking): the matching files not handed on yet, from the cursor or the prefix."""
        cursor, pattern = self.cursor, key_pattern_of(self.s3_uri)
        full = cursor.looks % self.full_listing_every == 0 or not self.keys_sort_by_arrival
        full = full or cursor.start_after is None
        if self._source is None:
            self._source = S3Source(self.aws_conn_id)
        selects, emitted = key_filter(pattern), cursor.emitted
        client, new, last, calls = self._source.client(), [], cursor.start_after, 0
        for page in list_pages(client, self.bucket, literal_prefix(pattern), None if full else cursor.start_after):
            calls += 1
            new.extend(EventFile.of_entry(e) for e in page if selects(e["Key"], int(e.get("Size") or 0))
                       and emitted.get(e["Key"]) != str(e.get("ETag") or "").strip('"'))
            last = max([last or "", *(e["Key"] for e in page)]) or None
        return Look(new, full, last, calls)

    def _events(self, look: Look) -> list[EventPayload]:
        return payloads(self.bucket, look.files, full_listing=look.full, limit=self.max_files_per_event)

    @property
    def _restart_key(self) -> tuple[str, str]:
        return ("s3ch.listing:" + self.s3_uri, str(self.aws_conn_id))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        pattern = key_pattern_of(self.s3_uri)
        self.log.info("listing watcher: bucket %r, prefix %r, keys matching %r, a look every %g s (aws connection "
                      "%r); until a key matches, nothing is handed on: check these for a typo", self.bucket,
                      literal_prefix(pattern), pattern, self.poll_interval, self.aws_conn_id)
        await RESTARTS.wait(self._restart_key, f"the listing watcher of {self.s3_uri}", self.log)
        await self._load_cursor()
        first = True
        while True:
            try:
                look = await asyncio.to_thread(self.look)
            except S3chTransientError as exc:
                self.log.warning("S3 listing of %s failed (%s); next look in %.0f s", self.s3_uri, exc,
                                 self.poll_interval)
            except S3chTerminalError as exc:  # a missing bucket, access denied, no such connection: say which
                error = type(exc)(f"the listing watcher of {self.s3_uri} failed: {exc}")
                RESTARTS.failed(self._restart_key, error)
                raise in_place_of(error, exc)  # noqa: B904 - its cause is exc's own
            else:
                RESTARTS.succeeded(self._restart_key)
                if first and not look.files:
                    self.log.info("no key under s3://%s/%s matches %r yet; the watcher waits for one", self.bucket,
                                  literal_prefix(pattern), pattern)
                first = False
                for event in self._events(look):
                    yield TriggerEvent(event.to_event())
                    self.cursor.emitted.update((f.key, f.etag) for f in event.files)
                self.cursor.looks += 1
                self.cursor.start_after = look.last_key
                await self._save_cursor()
                if look.files:
                    self.log.info("%d new file(s) under %s (%s listing, %d S3 call(s))", len(look.files),
                                  self.s3_uri, "full" if look.full else "cursor", look.calls)
            await asyncio.sleep(self.poll_interval)


def listing_watcher(name: str, **trigger: Any) -> Any:
    """An ``AssetWatcher`` named ``name`` whose trigger is an :class:`S3ListingEventTrigger` of ``trigger``'s
    arguments, for ``Asset(..., watchers=[...])``.

    :raises NeedsNewerAirflowError: on Airflow 2, which has no asset watchers.
    """
    require("an S3 listing watcher (AssetWatcher)", WATCHERS_SINCE)
    if note := missing_pieces("listing", AIRFLOW):
        warnings.warn(note, stacklevel=2)
    return AssetWatcher(name=name, trigger=S3ListingEventTrigger(**trigger))
