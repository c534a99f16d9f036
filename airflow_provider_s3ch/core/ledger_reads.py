"""What a ledger load's insert reads (the files named in its URL, the manifest narrowed to them, the files
that moved on since they were listed), and what the load reports of the ledger (the XCom's ``ledger`` entry,
its log line). Pure: no I/O. Which files a load takes is :mod:`airflow_provider_s3ch.core.ledger`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.glob import split_archive
from airflow_provider_s3ch.core.ledger import DEFAULT_CLAIM_TIMEOUT, KEYS_SHOWN, UNNAMEABLE, Selection
from airflow_provider_s3ch.core.ledger_rows import LedgerRow
from airflow_provider_s3ch.core.models import Manifest, S3Object, TableRef

# ---------------------------------------------------------------------- what the insert reads


def moved_on(files: Sequence[S3Object], now: Mapping[str, S3Object | None]
             ) -> tuple[list[S3Object], list[S3Object]]:
    """Of the files a load listed, those S3 no longer holds as listed: gone (no such key now), and overwritten (its
    ETag now another); a key not looked up counts as unchanged.

    :param files: the files as listed.
    :param now: each key's object as a HeadObject found it (None: no such key).
    """
    gone = [o for o in files if o.key in now and now[o.key] is None]
    changed = [o for o in files if (n := now.get(o.key)) is not None and n.etag and o.etag and n.etag != o.etag]
    return gone, changed


def key_list_pattern(keys: Sequence[str], pattern: str, *, archive_syntax: bool = True) -> tuple[str, str]:
    """The key pattern under which ClickHouse reads exactly ``keys``: one key as it is, several as one
    ``{k1,k2,…}`` group, which ClickHouse expands into direct reads without listing; for an archive glob
    (``a/*.zip :: *.csv``) the group of archives with the same member pattern.

    :param keys: the keys (non-empty).
    :param pattern: the load's own key pattern (its archive member pattern is kept).
    :param archive_syntax: ``allow_archive_path_syntax``.
    :return: the keys' part (what replaces the archive glob, see
        :func:`~airflow_provider_s3ch.core.glob.key_url`) and the whole pattern.
    :raises InvalidRequestError: a key that cannot be named in such a list (:data:`UNNAMEABLE`, or ``::``
        where it would read as an archive path).
    """
    if not keys:
        raise InvalidRequestError("no keys to read")
    member = split_archive(pattern, archive_syntax)[1]
    bad = [k for k in keys if any(c in UNNAMEABLE for c in k) or (archive_syntax and "::" in k)]
    if bad:
        listed = ", ".join(repr(k) for k in bad[:KEYS_SHOWN])
        raise InvalidRequestError(
            f"skip_loaded=True reads the new files by name, and ClickHouse cannot name {len(bad)} of them in a "
            f"key list (a key holding ',', '{{', '}}', '*', '?', '::' or a line break): {listed}; rename them, "
            "narrow s3_uri to leave them out, or load without skip_loaded"
        )
    body = keys[0] if len(keys) == 1 else "{" + ",".join(keys) + "}"
    return body, body if member is None else f"{body} :: {member}"


def narrow_manifest(manifest: Manifest, files: Sequence[S3Object], pattern: str) -> Manifest:
    """The manifest of the files this load reads, under the key-list ``pattern`` its URL is made from;
    the Parquet footers' uncompressed estimate scaled to the files' share of the bytes.

    :param manifest: the whole listing's manifest.
    :param files: the files this load reads.
    :param pattern: their key-list pattern (:func:`key_list_pattern`).
    """
    total = manifest.total_bytes
    part = sum(o.size for o in files)
    uncompressed = manifest.uncompressed_bytes
    if uncompressed is not None:
        uncompressed = uncompressed * part // total if total else uncompressed
    return manifest.model_copy(
        update={"objects": sorted(files, key=lambda o: o.key), "pattern": pattern, "uncompressed_bytes": uncompressed}
    )


# ---------------------------------------------------------------------- the summary


def shown(keys: Sequence[str]) -> list[str]:
    """The first :data:`KEYS_SHOWN` keys."""
    return list(keys[:KEYS_SHOWN])


def summary(
    ledger: TableRef, selection: Selection, *, load_id: str, lost: Sequence[S3Object] = (),
    committed: Sequence[LedgerRow] = (), claim_timeout: float = DEFAULT_CLAIM_TIMEOUT,
    gone: Sequence[str] = (), overwritten: Sequence[str] = (), set_aside: Sequence[Mapping[str, str]] = (),
    set_aside_before: Sequence[str] = (),
) -> dict[str, object]:
    """The XCom's ``ledger`` entry: counts of every outcome, and the first keys of each (JSON-safe).

    :param ledger: the ledger table.
    :param selection: the selection, its ``files`` the ones this load reads.
    :param load_id: this load's id.
    :param lost: files this load claimed and another load holds (they count as ``skipped_claimed``).
    :param committed: rows recorded ``loaded`` on this look (``pending`` rows whose staging table was gone).
    :param claim_timeout: the claim timeout in force.
    :param gone: keys deleted from S3 after the run's look (its events or listing) and before their insert: left
        out, nothing recorded loaded for them.
    :param overwritten: keys overwritten after the run's listing and before their chunk's insert: left out
        (their claims released) for the next look to load as the version they are then.
    :param set_aside: the files this load set aside (``on_bad_file='set_aside'``): key, ETag, the server's error.
    :param set_aside_before: listed keys whose version an earlier load set aside: left out.
    """
    claimed = [*selection.skipped_claimed, *(o.key for o in lost)]
    recovered = [r.key for r in committed]
    return {
        "table": str(ledger),
        "load_id": load_id,
        "retry": selection.retry,
        "new": len(selection.new),
        "reloaded": len(selection.reloaded),
        "skipped": len(selection.skipped_loaded) + len(claimed) + len(selection.skipped_changed),
        "skipped_loaded": len(selection.skipped_loaded),
        "skipped_claimed": len(claimed),
        "skipped_changed": len(selection.skipped_changed),
        "recovered": len(recovered),
        "new_keys": shown(selection.new),
        "reloaded_keys": shown(selection.reloaded),
        "skipped_loaded_keys": shown(selection.skipped_loaded),
        "skipped_claimed_keys": shown(claimed),
        "skipped_changed_keys": shown(selection.skipped_changed),
        "recovered_keys": shown(recovered),
        "gone": len(gone),
        "gone_keys": shown(gone),
        "overwritten": len(overwritten),
        "overwritten_keys": shown(overwritten),
        "set_aside": len(set_aside),
        "set_aside_files": [dict(f) for f in set_aside[:KEYS_SHOWN]],
        "set_aside_before": len(set_aside_before),
        "set_aside_before_keys": shown(set_aside_before),
        "keys_shown": KEYS_SHOWN,
        "claim_timeout": claim_timeout,
        "chunks": selection.chunks,
    }


def changed_warning(selection: Selection) -> str | None:
    """What the log says of the files left out as changed (``on_changed='skip'``); None when there are none."""
    keys = selection.skipped_changed
    if not keys:
        return None
    return (f"{len(keys)} file(s) overwritten since they were loaded (another ETag than the loaded version), left "
            f"out (on_changed='skip'); the table keeps the loaded version: {', '.join(shown(keys))}. To load the new "
            "versions: on_changed='reload' with mode='replace_partitions'")


def summary_line(s: Mapping[str, object]) -> str:
    """The log's line of a :func:`summary`: the counts of every outcome."""
    return (f"{s['new']} new, {s['reloaded']} reloaded; skipped {s['skipped_loaded']} loaded, {s['skipped_claimed']} "
            f"held by another load, {s['skipped_changed']} changed; {s['recovered']} recovered"
            + (f"; {s['gone']} gone from S3" if s.get("gone") else "")
            + (f"; {s['overwritten']} overwritten before their insert" if s.get("overwritten") else "")
            + (f"; {s['set_aside_before']} set aside earlier" if s.get("set_aside_before") else "")
            + (" (a retry: the files its earlier try held)" if s["retry"] else ""))
