"""Files set aside (``on_bad_file='set_aside'``, docs/ledger.md#bad-files): a file whose data the server cannot read
(a parse, decompress or format error that names it) is recorded in the ledger's table of files set aside, its claim
released, and its chunk loaded again without it; later loads leave that version out until its row is deleted or the
file is put again (another ETag)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from airflow_provider_s3ch.core.ledger import Chunk
from airflow_provider_s3ch.core.ledger_reads import shown
from airflow_provider_s3ch.core.ledger_rows import version_of
from airflow_provider_s3ch.core.ledger_sql import (
    FILES_TABLE,
    SET_ASIDE_ERROR_CHARS,
    WRITE_SETTINGS,
    key_table,
    render_read_set_aside,
    render_write_set_aside,
    set_aside_ref,
)
from airflow_provider_s3ch.core.models import LoadRequest, Manifest, S3Object, TableRef
from airflow_provider_s3ch.errors import ClickHouseQueryError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.load.ledger_table import LedgerTable

#: The most files one run sets aside: more files that the server cannot read look like the table's or the
#: structure's fault, not the files', and the run fails instead.
SET_ASIDE_LIMIT = 10


class SetsAside:
    """What :class:`~airflow_provider_s3ch.load.ledger.LedgerRun` does with files the server cannot read."""

    request: LoadRequest
    hook: ClickHouseHook
    ledger: TableRef
    target: str
    bucket: str
    own: str
    table: LedgerTable
    log: logging.Logger
    chunks: list[Chunk]
    #: This run's files set aside: key, ETag and the server's error; and the listed keys whose version an earlier
    #: load set aside (left out).
    set_aside: list[dict[str, str]]
    set_aside_before: list[str]

    def _drop(self, files: Sequence[S3Object]) -> None:  # pragma: no cover - LedgerRun's
        raise NotImplementedError

    def _without_set_aside(self, manifest: Manifest) -> Manifest:
        """The manifest less the versions set aside by earlier loads (counted in :attr:`set_aside_before`)."""
        self.set_aside_before = []
        if not self.table.has_set_aside or not manifest.objects:
            return manifest
        data = self.hook.execute(render_read_set_aside(self.ledger, FILES_TABLE), {"t": self.target, "b": self.bucket},
                                 external_tables=key_table(o.key for o in manifest.objects))
        versions = {(str(key), str(etag)) for key, etag, _ in data}
        aside = {o.key for o in manifest.objects if tuple(version_of(o)) in versions}
        if not aside:
            return manifest
        self.set_aside_before = sorted(aside)
        self.log.warning("Ledger: %d listed file(s) were set aside by earlier loads (the server could not read them; "
                         "see %s): left out: %s", len(aside), set_aside_ref(self.ledger), ", ".join(shown(
                             self.set_aside_before)))
        return manifest.model_copy(update={"objects": [o for o in manifest.objects if o.key not in aside]})

    def set_aside_bad(self, chunk: Chunk, error: ClickHouseQueryError, query_id: str) -> Chunk | None:
        """After ``chunk``'s insert failed on a file's data: the file set aside (recorded, then its claim released)
        and the chunk without it; None when the error is not a file's the load may set aside (the load fails).

        :raises ClickHouseQueryError: a file over :data:`SET_ASIDE_LIMIT` in this run (the load fails, saying so).
        """
        if self.request.on_bad_file != "set_aside" or error.bad_file is None:
            return None
        bad = next((o for o in chunk.files if f"{self.bucket}/{o.key}" == error.bad_file), None)
        if bad is None:
            return None
        if len(self.set_aside) >= SET_ASIDE_LIMIT:
            raise ClickHouseQueryError(
                f"{error}; not set aside: this run set aside {len(self.set_aside)} files already, the most one run "
                "does (so many files the server cannot read look like the table's columns or the structure, not the "
                f"files): fix that, then delete the rows of {set_aside_ref(self.ledger)} to load those files again"
            ) from error
        self.table.create_set_aside()
        etag, text = version_of(bad).etag, str(error)[:SET_ASIDE_ERROR_CHARS]
        self.hook.execute(render_write_set_aside(self.ledger), [
            [self.target, self.bucket, bad.key, etag, bad.size, self.own, query_id, text]], settings=WRITE_SETTINGS)
        self._drop([bad])
        self.set_aside.append({"key": bad.key, "etag": etag, "error": text})
        self.log.warning("Ledger: set aside %s (the server could not read it: %s); loading the other %d file(s) of "
                         "the chunk without it. It stays set aside until it is put again (another ETag) or its row "
                         "is deleted from %s", bad.key, text, len(chunk.files) - 1, set_aside_ref(self.ledger))
        return next((c for c in self.chunks if c.number == chunk.number), Chunk(number=chunk.number))
