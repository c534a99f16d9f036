"""Partition-safe ``replace_partitions`` with the ledger: a partition the new files share with files loaded
earlier is rebuilt from all of them. Pure: no I/O; :mod:`airflow_provider_s3ch.load.rebuild` runs it.

The ledger records, on each file's ``pending`` and ``loaded`` rows, the partition ids its insert wrote (the
insert's staging table's partitions: for an insert of several files, each file is recorded with all of
them, a superset). After the new files' insert, the partitions their staging table holds are known; the
earlier files recorded in any of them (or recorded before partitions were kept: any partition) are read
again into a second staging table, the new files' partitions are attached to it, and each touched
partition of the target is replaced from it: whole, with every file's rows once.

A rebuild reads the earlier files as the ledger recorded them: each must still be in S3 with the recorded
ETag and in the load's bucket. When one is not, the load is refused before the target changes
(:class:`RebuildRefused`), naming the partitions, the files and the way forward.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.models import S3Object

#: How many files and partitions a refusal names (the counts are whole).
NAMED = 10

#: How many files the report names per rebuilt partition (the counts are whole).
NAMED_IN_REPORT = 20


class RebuildRefused(PlanError):
    """A touched partition holds rows of a file that cannot be read again as it was loaded."""


class EarlierRow(BaseModel):
    """The latest version of a ledger row of another load of the target (``loaded``, or ``pending``)."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    key: str
    etag: str
    load_id: str
    unit: str
    state: str
    #: Partition ids the row's insert wrote; empty: recorded before partitions were kept (any partition).
    partitions: tuple[str, ...] = ()
    version: int = 0
    block: int = 0

    def touches(self, partitions: Collection[str]) -> bool:
        return not self.partitions or any(p in partitions for p in self.partitions)


class EarlierLoads(NamedTuple):
    """What the other loads of a target recorded in some partitions."""

    #: Their latest ``loaded`` and ``pending`` rows.
    rows: list[EarlierRow]
    #: The units among them whose staging table exists (their load may still move it).
    in_flight: frozenset[str]
    #: The smallest block number of this load's own ``pending`` rows there (0: none).
    own_block: int


class Rebuild(BaseModel):
    """What makes the touched partitions whole."""

    #: Partition ids replaced in the target from the rebuild table: the new files' and, for a reloaded file,
    #: those its old version wrote.
    partitions: list[str] = Field(default_factory=list)
    #: The earlier files read again, as the ledger recorded them (key, ETag, size).
    files: list[S3Object] = Field(default_factory=list)

    #: Partitions the new files do not hold (a reloaded file's old version's).
    extra: list[str] = Field(default_factory=list)

    @property
    def needed(self) -> bool:
        """Whether the new files' staging table alone does not make the partitions whole."""
        return bool(self.files or self.extra)


class RebuiltPartition(BaseModel):
    """One partition a ``replace_partitions`` load with the ledger replaced in the target (the XCom's
    ``rebuilt``)."""

    partition_id: str
    #: No row of it was left (a reloaded file's old version alone held it): dropped in the target.
    dropped: bool = False
    #: How many files loaded earlier were read again for it (the ledger records rows of theirs there).
    earlier_count: int = 0
    #: The first :data:`NAMED_IN_REPORT` of them.
    earlier_files: list[str] = Field(default_factory=list)
    #: This insert's files (the first :data:`NAMED_IN_REPORT`): the new and reloaded ones.
    new_files: list[str] = Field(default_factory=list)


def plan_rebuild(
    new_partitions: Sequence[str], rows: Sequence[EarlierRow], *, bucket: str, keys: Collection[str],
    in_flight: Collection[str], listed: Mapping[str, S3Object | None],
) -> Rebuild:
    """The earlier files to read again for the partitions the new files wrote.

    :param new_partitions: partition ids of the new files' staging table.
    :param rows: the latest versions of the ledger rows of other loads of the target (``loaded`` or ``pending``).
    :param bucket: the load's bucket.
    :param keys: the keys this load reads (a reloaded key's earlier versions are replaced, not read again).
    :param in_flight: units whose staging table exists (their ``pending`` rows are not in the target yet).
    :param listed: each earlier key's object in S3 now (None: gone), for the keys :func:`candidates` named.
    :raises RebuildRefused: an earlier file of a touched partition is gone, changed or in another bucket.
    """
    latest = _latest(rows, in_flight)
    extra, every = _touched(latest, new_partitions, bucket=bucket, keys=keys)
    if not every:  # the new files gave no row, and no reloaded file wrote any: nothing is replaced
        return Rebuild()
    files: list[S3Object] = []
    problems: list[str] = []
    for (row_bucket, key), row in sorted(latest.items()):
        if (row_bucket == bucket and key in keys) or not row.touches(every):
            continue
        now = listed.get(key) if row_bucket == bucket else None
        if row_bucket != bucket:
            problems.append(f"{key} (in bucket {row_bucket})")
        elif now is None:
            problems.append(f"{key} (gone from S3)")
        elif row.etag and now.etag and now.etag != row.etag:
            problems.append(f"{key} (changed since it was loaded: ETag {now.etag}, loaded {row.etag})")
        else:
            files.append(now)
    if problems:
        shown = ", ".join(sorted(every)[:NAMED]) + (f" and {len(every) - NAMED} more" if len(every) > NAMED else "")
        named = "; ".join(problems[:NAMED]) + (f"; and {len(problems) - NAMED} more" if len(problems) > NAMED else "")
        raise RebuildRefused(
            f"mode='replace_partitions' would replace partition(s) {shown} with the new files' rows, but "
            f"{len(problems)} file(s) loaded into them earlier cannot be read again as they were loaded: {named}. "
            "The target is unchanged. Restore those files, or load the new files with mode='append'"
        )
    return Rebuild(partitions=sorted(every), files=files, extra=extra)


def touched(rows: Sequence[EarlierRow], new_partitions: Sequence[str], *, bucket: str, keys: Collection[str],
            in_flight: Collection[str]) -> list[str]:
    """Every partition the load replaces: the new files' and those a reloaded file's old version wrote. The
    ledger's rows of the earlier files must be read for all of them, not only for the new files' partitions:
    a partition the old version wrote alone holds rows of files loaded after it, recorded there only.

    :param rows: the latest ledger rows read so far (with this load's keys' rows, wherever they wrote).
    """
    return sorted(_touched(_latest(rows, in_flight), new_partitions, bucket=bucket, keys=keys)[1])


def rebuilt_partitions(rebuild: Rebuild, rows: Sequence[EarlierRow], present: Collection[str], *,
                       in_flight: Collection[str], new_keys: Sequence[str]) -> list[RebuiltPartition]:
    """What each replaced partition was rebuilt from, for the report: the earlier files the ledger records in
    it (read again) and this insert's files.

    :param rebuild: the rebuild made.
    :param rows: the ledger rows it was planned from.
    :param present: the partition ids the rebuild table holds (the others were dropped: no row left).
    :param new_keys: the keys of this insert's files.
    """
    read = {o.key for o in rebuild.files}
    latest = [r for r in _latest(rows, in_flight).values() if r.key in read]
    out = []
    for pid in rebuild.partitions:
        earlier = sorted({r.key for r in latest if r.touches([pid])})
        out.append(RebuiltPartition(partition_id=pid, dropped=pid not in present, earlier_count=len(earlier),
                                    earlier_files=earlier[:NAMED_IN_REPORT],
                                    new_files=list(new_keys[:NAMED_IN_REPORT])))
    return out


def candidates(rows: Sequence[EarlierRow], new_partitions: Sequence[str], *, bucket: str,
               keys: Collection[str], in_flight: Collection[str]) -> list[str]:
    """The earlier keys in ``bucket`` that :func:`plan_rebuild` needs the S3 objects of (at most)."""
    latest = _latest(rows, in_flight)
    every = _touched(latest, new_partitions, bucket=bucket, keys=keys)[1]
    if not every:
        return []
    return sorted({key for (b, key), r in latest.items() if b == bucket and key not in keys and r.touches(every)})


def conflicts(rows: Sequence[EarlierRow], partitions: Collection[str], *, in_flight: Collection[str],
              before: int) -> list[EarlierRow]:
    """Another load's ``pending`` rows that are still being brought into the same partitions and were written
    before this load's (``_block_number`` below ``before``): this load yields to them, and its retry rebuilds
    the partitions with their files."""
    return [r for r in rows if r.state == "pending" and r.unit in in_flight and r.block < before
            and r.touches(partitions)]


def _touched(latest: Mapping[tuple[str, str], EarlierRow], new_partitions: Sequence[str], *, bucket: str,
             keys: Collection[str]) -> tuple[list[str], set[str]]:
    """The partitions a reloaded file's old version wrote beside the new files', and all the touched ones."""
    touched = set(new_partitions)
    extra = sorted({p for r in latest.values() if r.key in keys and r.bucket == bucket for p in r.partitions} - touched)
    return extra, touched | set(extra)


def _latest(rows: Sequence[EarlierRow], in_flight: Collection[str]) -> dict[tuple[str, str], EarlierRow]:
    """Per (bucket, key), the version in the target: the newest ``loaded`` row, or ``pending`` one whose
    staging table is gone (committed)."""
    out: dict[tuple[str, str], EarlierRow] = {}
    for row in rows:
        if row.state == "pending" and row.unit in in_flight:
            continue
        if row.state not in ("loaded", "pending"):
            continue
        old = out.get((row.bucket, row.key))
        if old is None or row.version > old.version:
            out[(row.bucket, row.key)] = row
    return out
