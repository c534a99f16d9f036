"""How far behind the table is: the figures a ledger run reports of the files it found, loaded and left.

A continuous load is judged by how late its rows are, not by how fast one insert ran. Each ledger run reports
(docs/lag.md):

* the **lag**: now − the oldest ``LastModified`` among the files the run found not loaded at its start, and
  the lag still left when it ends (the oldest file still not loaded: files another load holds, changed files
  skipped, files left for later); 0 when there is none;
* the **pending** files and bytes when the run ends: the files left, and the files the triggering events say
  their watcher found and hands on in later events;
* the **latency** of each file it loaded, from landing (``LastModified``) to its rows being visible (its
  chunk published), as p50 / p95 / max;
* the **queue depth**: the asset events the run took and the files they named (:func:`queue_of`).

Pure: no I/O. The load run gives the moments (the server's clock where it read it) and the files.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

from airflow_provider_s3ch.core.events import RunFiles
from airflow_provider_s3ch.core.ledger import Selection
from airflow_provider_s3ch.core.models import S3Object
from airflow_provider_s3ch.core.sizes import fmt_bytes

#: The statement that reads the server's clock right after a run's last chunk was published (microseconds since
#: the epoch, UTC: no time zone to interpret).
SERVER_NOW_SQL = "SELECT toUnixTimestamp64Micro(now64(6))"


class QueueDepth(BaseModel):
    """The asset events a run took: how many, and how many files they named."""

    #: Asset events that triggered the run (of any kind).
    events: int = Field(0, ge=0)
    #: Of them, the S3 watchers' events of the load's bucket.
    watcher_events: int = Field(0, ge=0)
    #: The watchers' events stored after the run's own, which the run took too.
    waiting_events: int = Field(0, ge=0)
    #: Files the watchers' events named (each key once).
    files: int = Field(0, ge=0)
    #: Files their watchers found and hand on in later events
    #: (:func:`~airflow_provider_s3ch.core.events.events_pending`).
    pending: int = Field(0, ge=0)


class Latency(BaseModel):
    """Seconds from each loaded file's ``LastModified`` to its rows being visible, over the run's files."""

    files: int = Field(ge=1)
    p50_s: float = Field(ge=0)
    p95_s: float = Field(ge=0)
    max_s: float = Field(ge=0)


class Freshness(BaseModel):
    """The XCom's ``freshness``: how far behind the table was when the run started and is when it ends."""

    #: Seconds from the oldest ``LastModified`` among the files found not loaded at the run's start to its start.
    lag_s: float = Field(ge=0)
    #: Seconds from the oldest ``LastModified`` among the files still not loaded to the run's end.
    lag_left_s: float = Field(ge=0)
    #: Files matching the glob and not loaded at the run's start; of them, those this run loaded.
    unloaded_files: int = Field(ge=0)
    loaded_files: int = Field(ge=0)
    #: Files matching and not loaded when the run ends: ``held + changed + later``.
    pending_files: int = Field(ge=0)
    #: Bytes of the pending files whose size is known (those of ``later`` that the events only counted are not).
    pending_bytes: int = Field(ge=0)
    #: Pending files another load holds (claimed before this run, or taken from it while it ran).
    pending_held: int = Field(ge=0)
    #: Pending files whose loaded version changed (another ETag) and that the run skipped (``on_changed='skip'``).
    pending_changed: int = Field(ge=0)
    #: Pending files left for a later run: found but not loaded by this one, and those the events' watchers
    #: hand on in later events.
    pending_later: int = Field(ge=0)
    #: From landing to rows visible, over the files this run loaded; None when it loaded none.
    latency: Latency | None = None
    #: The triggering asset events; None when the caller did not give them.
    queue_depth: QueueDepth | None = None
    #: Whose clock "now" and "visible" are: the ClickHouse server's (read after the last publish), or the
    #: worker's (nothing published, or the server's clock could not be read).
    clock: Literal["server", "worker"] = "worker"


class Standing(NamedTuple):
    """What the ledger says of a run's files: those not loaded at its start, and which of them stay out."""

    #: The files matching and not loaded (one per key).
    unloaded: list[S3Object]
    #: Keys another load holds: claimed before the run, or taken from it while it ran.
    held: list[str]
    #: Keys whose loaded version changed and that the run skipped (``on_changed='skip'``).
    changed: list[str]


def standing(listed: Iterable[S3Object], selection: Selection, lost: Iterable[S3Object] = ()) -> Standing:
    """The run's :class:`Standing` from the ledger's selection of the listed files.

    :param listed: the files the glob matched (listed, or named by the events).
    :param selection: the ledger's selection (its ``files``: those the run reads).
    :param lost: files the run claimed and another load took.
    """
    skipped = set(selection.skipped_loaded)
    unloaded = {o.key: o for o in listed if o.key not in skipped}
    unloaded.update({o.key: o for o in selection.files if o.key not in unloaded})  # a retry's, gone from the listing
    return Standing(list(unloaded.values()), [*selection.skipped_claimed, *(o.key for o in lost)],
                    list(selection.skipped_changed))


def queue_of(chosen: RunFiles) -> QueueDepth | None:
    """The queue depth of a run from events, from what :func:`~airflow_provider_s3ch.core.events.run_files` chose;
    None for a run no event triggered (a time schedule, a manual run)."""
    if not chosen.events:
        return None
    return QueueDepth(events=chosen.events, watcher_events=chosen.watcher_events,
                      waiting_events=chosen.waiting_events, files=len(chosen.files or []), pending=chosen.pending)


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile of ``values`` (not empty): the smallest value with ``share`` of them at or
    below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def latency(seconds: Sequence[float]) -> Latency | None:
    """p50 / p95 / max of the files' latencies (negative ones, a clock ahead of the other, count as 0)."""
    if not seconds:
        return None
    clipped = [max(0.0, s) for s in seconds]
    return Latency(files=len(clipped), p50_s=round(percentile(clipped, 0.5), 3),
                   p95_s=round(percentile(clipped, 0.95), 3), max_s=round(max(clipped), 3))


def lag(files: Iterable[S3Object], now: datetime) -> float:
    """Seconds from the oldest ``LastModified`` of ``files`` to ``now``: 0 when there is none (or none known),
    never negative."""
    oldest = min((f.last_modified for f in files if f.last_modified is not None), default=None)
    return 0.0 if oldest is None else round(max(0.0, (now - oldest).total_seconds()), 3)


def freshness(unloaded: Sequence[S3Object], visible: Mapping[str, datetime], *, held: Collection[str] = (),
              changed: Collection[str] = (), started: datetime, ended: datetime, queue: QueueDepth | None = None,
              clock: Literal["server", "worker"] = "worker") -> Freshness:
    """The run's figures.

    :param unloaded: the files matching and not loaded at the run's start (one per key, with their
        ``LastModified``).
    :param visible: of them, the ones this run loaded, by key: when their rows became visible.
    :param held: keys another load holds (claimed before the run, or taken from it while it ran).
    :param changed: keys whose loaded version changed and that the run skipped.
    :param started: the run's start (when it found the files).
    :param ended: the run's end.
    :param queue: the triggering events (their ``pending`` counts among the files left for later).
    :param clock: whose clock ``started``, ``ended`` and ``visible`` are.
    """
    left = [f for f in unloaded if f.key not in visible]
    held_keys, changed_keys = set(held), set(changed) - set(held)
    n_held = sum(f.key in held_keys for f in left)
    n_changed = sum(f.key in changed_keys for f in left)
    later = len(left) - n_held - n_changed + (queue.pending if queue is not None else 0)
    landed = {f.key: f.last_modified for f in unloaded if f.last_modified is not None}
    return Freshness(
        lag_s=lag(unloaded, started), lag_left_s=lag(left, ended), unloaded_files=len(unloaded),
        loaded_files=len(unloaded) - len(left), pending_files=n_held + n_changed + later,
        pending_bytes=sum(f.size for f in left), pending_held=n_held, pending_changed=n_changed, pending_later=later,
        latency=latency([(moment - landed[key]).total_seconds() for key, moment in visible.items() if key in landed]),
        queue_depth=queue, clock=clock,
    )


def summary_line(f: Freshness) -> str:
    """The task log's line of the figures."""
    line = (f"lag {f.lag_s:.1f} s at the start, {f.lag_left_s:.1f} s left; loaded {f.loaded_files} of "
            f"{f.unloaded_files} file(s) not loaded before; pending {f.pending_files} file(s) "
            f"({fmt_bytes(f.pending_bytes)} known): {f.pending_held} held by another load, {f.pending_changed} "
            f"changed, {f.pending_later} for later")
    if f.latency is not None:
        lat = f.latency
        line += (f"; from landing to rows visible p50 {lat.p50_s:.1f} s, p95 {lat.p95_s:.1f} s, max {lat.max_s:.1f} s "
                 f"over {lat.files} file(s)")
    if f.queue_depth is not None:
        q = f.queue_depth
        line += (f"; {q.events} asset event(s), {q.watcher_events} from an S3 watcher naming {q.files} file(s), "
                 f"{q.pending} more to come")
    return line + f" ({f.clock} clock)"
