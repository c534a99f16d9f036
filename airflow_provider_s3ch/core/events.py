"""The files an event names: what a watcher's trigger hands a run, and what the run loads from it.

A run started from events loads the files they name instead of listing the glob's prefix. An event
is a hint, never the truth: the file ledger decides what is new (docs/ledger.md). So an event
carries little (each file's key, size, ETag and last-modified time; at most :data:`MAX_FILES_PER_EVENT`
files, with a count of those left for the next event), and the functions here make a stream of
events that repeats, drops or reorders files mean the same set of files:

* :func:`notification_files`: S3 event notifications (an SQS message's body, as S3 and moto send
  them) -> the created files they name; test events and other kinds of events are dropped;
* :func:`matching`: the files the operator's glob selects, exactly as ClickHouse's ``s3()`` does
  (:mod:`.glob`);
* :func:`collapse`: one entry per key and ETag; :func:`payloads`: files cut into bounded events;
* :func:`union`: the files of all the events a run was triggered by: the latest ETag of each key,
  ordered by key; :func:`manifest_of`: their manifest, as a listing would have made it;
* :func:`run_files`: what a run with ``files_from='events'`` loads (the events' files, or the listing where no
  S3 watcher's event triggered it); :func:`check_events_request`: what such a run refuses.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_plus

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_s3ch.core.errors import InvalidRequestError, NothingMatchedError
from airflow_provider_s3ch.core.glob import archive_path_syntax, compile_glob, split_archive
from airflow_provider_s3ch.core.manifest import Listing, check_listing, make_manifest
from airflow_provider_s3ch.core.models import LoadRequest, Manifest, S3Object

#: The most files one event names; more wait for the next event (the payload's ``pending``).
MAX_FILES_PER_EVENT = 1000

#: The key under which an event's payload says what it is (a run recognises its own events by it).
PAYLOAD_KIND = "s3ch.files"


class EventFile(BaseModel):
    """One file an event names: what the ledger needs of it (its version) and what the plan needs (its size)."""

    model_config = ConfigDict(frozen=True)

    key: str
    size: int = Field(ge=0)
    #: The ETag without its quotes.
    etag: str
    #: When the object was written (a notification's ``eventTime``, a listing's ``LastModified``), in UTC.
    last_modified: datetime

    @classmethod
    def of_entry(cls, entry: Mapping[str, Any]) -> EventFile:
        """The file of one ListObjectsV2 ``Contents`` entry."""
        modified = entry["LastModified"]
        return cls(key=entry["Key"], size=int(entry.get("Size") or 0), etag=str(entry.get("ETag") or "").strip('"'),
                   last_modified=modified.astimezone(UTC))


class EventPayload(BaseModel):
    """What one event carries: at most :data:`MAX_FILES_PER_EVENT` files, and how many more the trigger found
    that later events will carry."""

    kind: str = PAYLOAD_KIND
    #: The bucket the files are in.
    bucket: str
    files: list[EventFile] = Field(max_length=MAX_FILES_PER_EVENT)
    #: Files found but left for the next events of the same look.
    pending: int = Field(default=0, ge=0)
    #: Whether a full listing (the backstop) found these files, not the look from the cursor.
    full_listing: bool = False

    def to_event(self) -> dict[str, Any]:
        """The payload as a JSON-safe dict (a trigger event's payload; Airflow stores it as the asset event's
        ``extra["payload"]``)."""
        return self.model_dump(mode="json")


def notification_files(body: str | Mapping[str, Any], bucket: str | None = None) -> list[EventFile]:
    """The created files an S3 event notification names.

    :param body: the SQS message's body (JSON text or its dict): ``{"Records": [...]}``. The ``s3:TestEvent``
        S3 sends when a queue is configured (no ``Records``) names none.
    :param bucket: keep only records of this bucket; None keeps all.
    :return: one file per ``ObjectCreated:*`` record, the key URL-decoded (S3 encodes it with ``quote_plus``),
        ``eventTime`` as its last-modified time; other events (removals, restores) are dropped.
    """
    message = json.loads(body) if isinstance(body, str) else body
    files = []
    for record in message.get("Records") or []:
        if not str(record.get("eventName", "")).removeprefix("s3:").startswith("ObjectCreated:"):
            continue
        s3 = record.get("s3") or {}
        if bucket is not None and (s3.get("bucket") or {}).get("name") != bucket:
            continue
        obj = s3.get("object") or {}
        files.append(EventFile(key=unquote_plus(obj["key"]), size=int(obj.get("size") or 0),
                               etag=str(obj.get("eTag") or "").strip('"'),
                               last_modified=_utc(record["eventTime"])))
    return files


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def key_filter(pattern: str, settings: Mapping[str, object] | None = None) -> Callable[[str, int], bool]:
    """Whether ClickHouse's ``s3()`` reads a key (of a size) for the key glob (an archive glob: the archives it
    names); folder markers (a key ending in ``/``, empty) are left out, as a listing leaves them.

    :param pattern: the key part of the operator's ``s3_uri``.
    :param settings: the load's settings (``allow_archive_path_syntax``).
    :raises InvalidRequestError: when ClickHouse rejects the glob.
    """
    glob = compile_glob(split_archive(pattern, archive_path_syntax(settings))[0])
    return lambda key, size: glob.fullmatch(key) and not (key.endswith("/") and size == 0)


def matching(files: Iterable[EventFile], pattern: str, settings: Mapping[str, object] | None = None) -> list[EventFile]:
    """The files the key glob selects (:func:`key_filter`), in their order."""
    selects = key_filter(pattern, settings)
    return [f for f in files if selects(f.key, f.size)]


def collapse(files: Iterable[EventFile]) -> list[EventFile]:
    """One entry per key and ETag (the first seen), in the order first seen."""
    seen: dict[tuple[str, str], EventFile] = {}
    for f in files:
        seen.setdefault((f.key, f.etag), f)
    return list(seen.values())


def payloads(bucket: str, files: Iterable[EventFile], *, full_listing: bool = False,
             limit: int = MAX_FILES_PER_EVENT) -> list[EventPayload]:
    """Files cut into events of at most ``limit`` files each, in order; each says how many come after it.

    :param bucket: the files' bucket.
    :param files: the files to hand on (duplicates collapsed first).
    :param full_listing: they come from a full listing (the backstop).
    """
    unique = collapse(files)
    limit = max(1, min(limit, MAX_FILES_PER_EVENT))
    cuts = range(0, len(unique), limit)
    return [EventPayload(bucket=bucket, files=unique[i:i + limit], pending=max(0, len(unique) - i - limit),
                         full_listing=full_listing) for i in cuts]


def union(events: Iterable[EventPayload]) -> list[EventFile]:
    """The files of several events, as one run loads them: the latest version of each key (by last-modified
    time; for equal times, the larger ETag, so that the answer does not depend on the events' order), ordered
    by key."""
    latest: dict[str, EventFile] = {}
    for event in events:
        for f in event.files:
            known = latest.get(f.key)
            if known is None or (f.last_modified, f.etag) > (known.last_modified, known.etag):
                latest[f.key] = f
    return [latest[key] for key in sorted(latest)]


def events_pending(events: Sequence[EventPayload]) -> int:
    """The files the events' watchers found and hand on in events that are not among ``events``.

    A watcher cuts what one look found into events of bounded size, each saying how many files follow it
    (``pending``). An event's ``pending`` counts unless a later one of ``events`` continues it (its own ``pending``
    plus its files make the earlier one's ``pending``): then the later event says what is still to come.

    :param events: the run's events, in the order they were stored.
    """
    total = 0
    continues: Counter[tuple[str, bool, int]] = Counter()
    for event in reversed(events):
        signature = (event.bucket, event.full_listing, event.pending)
        if event.pending and continues[signature]:
            continues[signature] -= 1
        else:
            total += event.pending
        continues[(event.bucket, event.full_listing, event.pending + len(event.files))] += 1
    return total


def event_payloads(extras: Iterable[Mapping[str, Any] | None], bucket: str) -> list[EventPayload]:
    """The payloads of the asset events a run was triggered by, from each event's ``extra``; events that are
    not this provider's (another watcher's, a task's outlet) or name another bucket are skipped.

    :param extras: each asset event's ``extra`` (a trigger's event payload is its ``extra["payload"]``).
    :param bucket: the load's bucket.
    """
    out = []
    for extra in extras:
        payload = (extra or {}).get("payload")
        if isinstance(payload, Mapping) and payload.get("kind") == PAYLOAD_KIND:
            event = EventPayload.model_validate(payload)
            if event.bucket == bucket:
                out.append(event)
    return out


def as_now(files: Sequence[EventFile], now: Mapping[str, S3Object | None]
           ) -> tuple[list[EventFile], list[str], list[str]]:
    """The files events named, as S3 holds them now: an event is a hint, and the file may have been overwritten
    (another ETag) or deleted since. A run loads the version S3 holds when it looks (and the ledger records that
    one); a file gone is left out.

    :param files: the files the events name (one per key: :func:`union`).
    :param now: each key's object as a HeadObject found it (None: no such key).
    :return: the files there now (their size, ETag and time S3's), the keys gone, and the keys whose ETag changed.
    """
    current: list[EventFile] = []
    gone: list[str] = []
    changed: list[str] = []
    for f in files:
        obj = now.get(f.key, f)  # a key not looked up keeps the event's version
        if obj is None:
            gone.append(f.key)
            continue
        if isinstance(obj, EventFile):
            current.append(obj)
            continue
        etag = obj.etag or f.etag
        if etag == f.etag:  # the version the event names: its landing time is the event's
            current.append(f)
            continue
        changed.append(f.key)
        current.append(EventFile(key=f.key, size=obj.size, etag=etag,
                                 last_modified=obj.last_modified or f.last_modified))
    return current, gone, changed


def manifest_of(request: LoadRequest, files: Iterable[EventFile], *, region: str | None, calls: int,
                gone: Iterable[str] = ()) -> Manifest:
    """The manifest of files an event named, as a listing of the same files would have made it: the glob's
    files only, format and compression from the keys (unless the request names them), checked as a listing is.

    :param request: the validated request.
    :param files: the files (:func:`union` of the run's events).
    :param region: the bucket's region; None when unknown.
    :param calls: the S3 calls made to settle it (the location, the files' HeadObjects).
    :param gone: keys of ``files`` that S3 no longer holds: in the manifest's ``gone`` (the ledger leaves them out).
    :raises NothingMatchedError: none of the files matches the glob.
    :raises InvalidRequestError: the glob matches a key ClickHouse cannot read as named.
    :raises FormatError: the files' format or compression is unknown or mixed and the request names none.
    """
    listing = Listing(request.key_pattern, archive_syntax=archive_path_syntax(request.settings))
    given = list(files)
    listing.add_page({"Key": f.key, "Size": f.size} for f in given)
    listing.calls = 0  # nothing was listed
    if not listing.matched:
        raise NothingMatchedError(
            f"none of the {len(given)} file(s) the triggering events name in bucket {request.bucket!r} matches "
            f"{request.key_pattern!r}"
        )
    versions = {f.key: f for f in given}
    for obj in listing.matched:
        obj.etag, obj.last_modified = versions[obj.key].etag or None, versions[obj.key].last_modified
    check_listing(request, listing)
    manifest = make_manifest(request, listing, region=region, calls=calls)
    missing = set(gone)
    return manifest.model_copy(update={"gone": sorted({o.key for o in manifest.objects} & missing)}) if missing \
        else manifest


def message_files(body: str, bucket: str | None = None) -> list[EventFile] | None:
    """The created files one SQS message names: an S3 event notification as S3 sends it to a queue, or one that
    an SNS topic passed on (``{"Type": "Notification", "Message": "<the notification as text>"}``).

    :param body: the message's body.
    :param bucket: keep only records of this bucket; None keeps all.
    :return: :func:`notification_files` of the notification (none for the ``s3:TestEvent``); None when the body
        is no S3 notification a file could be read from (not JSON, a record without its key or time).
    """
    try:
        message = json.loads(body)
        if isinstance(message, Mapping) and message.get("Type") == "Notification" and "Message" in message:
            message = json.loads(message["Message"])
        if not isinstance(message, Mapping):
            return None
        return notification_files(message, bucket)
    except (ValueError, TypeError, KeyError, AttributeError):  # pydantic's ValidationError is a ValueError
        return None


#: Where a run's files come from: the glob's listing, or the asset events that triggered the run.
FILES_FROM = ("listing", "events")


class RunFiles(BaseModel):
    """What a run loads from: the files its triggering events name, or the listing (``files`` None), and why."""

    #: The files (:func:`union` of the S3 watchers' events); None: the run lists the glob.
    files: list[EventFile] | None = None
    #: The asset events that triggered the run, of any kind.
    events: int = 0
    #: Of them, the S3 watchers' events of the load's bucket.
    watcher_events: int = 0
    #: Files those events' watchers found but hand on in later events.
    pending: int = 0
    #: Of the watchers' events, those stored after the run's own (Airflow left them for a later run), taken too.
    waiting_events: int = 0
    #: One line for the task log.
    note: str = ""


def check_files_from(files_from: str) -> None:
    """Refuse an unknown ``files_from`` (at DAG parse time)."""
    if files_from not in FILES_FROM:
        raise InvalidRequestError(f"files_from={files_from!r}: give one of {', '.join(map(repr, FILES_FROM))}")


def default_on_changed(files_from: str) -> str:
    """``on_changed`` when the DAG leaves it out: ``skip`` for a continuous run (an overwritten file is reported
    and left out while the others flow), ``fail`` for a listed load."""
    return "skip" if files_from == "events" else "fail"


def check_events_request(request: LoadRequest) -> None:
    """Refuse what a run from events cannot do safely, before anything is listed or loaded.

    :raises InvalidRequestError: without ``skip_loaded=True`` (an event is a hint: it may repeat, come late or out
        of order, and the file ledger is what loads each file once); with ``on_changed='fail'`` (one overwritten
        file would fail every run that sees it and stop the stream).
    """
    if not request.skip_loaded:
        raise InvalidRequestError(
            "files_from='events' needs skip_loaded=True: events may repeat, come late or out of order, and the "
            "file ledger is what loads each file once (docs/continuous.md)"
        )
    if request.on_changed == "fail":
        raise InvalidRequestError(
            "on_changed='fail' cannot run with files_from='events': one overwritten file would fail every run that "
            "sees it and stop the stream; use on_changed='skip' (the default here: the file is reported in the log "
            "and the XCom's ledger figures, and the other files keep flowing) or 'reload' with "
            "mode='replace_partitions' (docs/continuous.md)"
        )


def run_files(request: LoadRequest, extras: Iterable[Mapping[str, Any] | None],
              waiting: Iterable[Mapping[str, Any] | None] = ()) -> RunFiles:
    """The files a run with ``files_from='events'`` loads: those its S3 watchers' events name (no listing), or the
    listing's where no such event triggered it (a time schedule, a manual run, an event posted by a task).

    :param request: the validated request (:func:`check_events_request` holds).
    :param extras: the ``extra`` of each asset event that triggered the run.
    :param waiting: the ``extra`` of the events of the same assets stored since (``compat.events_since``): their
        files are taken too, where the run takes events at all.
    """
    extras = list(extras)
    if not extras:
        return RunFiles(note=f"No asset event triggered this run: listing {request.s3_uri}")
    found = event_payloads(extras, request.bucket)
    if not found:  # events of another kind (a task's outlet, one posted by hand): the listing decides
        return RunFiles(events=len(extras), note=(
            f"None of the {len(extras)} asset event(s) is an S3 watcher's of bucket {request.bucket}: listing "
            f"{request.s3_uri}"))
    later = event_payloads(waiting, request.bucket)
    files = union([*found, *later])
    pending = events_pending([*found, *later])
    return RunFiles(files=files, events=len(extras), watcher_events=len(found), pending=pending,
                    waiting_events=len(later), note=(
        f"{len(extras)} asset event(s), {len(found)} of them from an S3 watcher of bucket {request.bucket}"
        + (f", and {len(later)} stored since" if later else "") + f": {len(files)} file(s), no listing"
        + (f"; {pending} more to come in later events" if pending else "")))
