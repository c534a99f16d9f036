"""A ledger load's files as S3 holds them when a chunk's insert begins: a file deleted or overwritten since the
run's listing is left out of its chunk, its claim released, and counted (the XCom's ``gone`` and ``overwritten``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from airflow_provider_s3ch.core.ledger import Chunk, Selection
from airflow_provider_s3ch.core.ledger_reads import moved_on
from airflow_provider_s3ch.core.models import LoadRequest, S3Object


class LooksAgain:
    """What :class:`~airflow_provider_s3ch.load.ledger.LedgerRun` does before a chunk's insert about the files'
    versions now."""

    request: LoadRequest
    selection: Selection
    chunks: list[Chunk]
    log: logging.Logger
    #: Looks up files as S3 holds them now (HeadObject); None: the load does not look again.
    look: Callable[[list[str]], Mapping[str, S3Object | None]] | None
    #: Keys deleted from S3 since the run's look (its events, or its listing), and keys overwritten since its listing.
    gone: list[str]
    overwritten: list[str]

    def _drop(self, files: Sequence[S3Object]) -> None:  # pragma: no cover - LedgerRun's
        raise NotImplementedError

    def _looks_again(self, chunk: Chunk) -> bool:
        """A first try's chunk after the first is looked up again before its insert (the run's look at S3 came
        before the inserts of the chunks before it); not a retry's (its staging table may hold what it read)."""
        return (self.look is not None and not self.request.dry_run and not self.selection.retry and bool(chunk.files)
                and chunk.number != self.chunks[0].number and chunk.number not in self.selection.finished_inserts)

    def _as_now(self, chunk: Chunk) -> Chunk:
        """The chunk less its files deleted or overwritten since the listing (:func:`moved_on`): their claims are
        released; the next look finds an overwritten file as what it is then."""
        assert self.look is not None
        gone, changed = moved_on(chunk.files, self.look([o.key for o in chunk.files]))
        self.gone.extend(o.key for o in gone)
        self.overwritten.extend(o.key for o in changed)
        for what, files in (("deleted from S3", gone), ("overwritten", changed)):
            if files:
                self.log.warning("Ledger: %d file(s) of chunk %d were %s after the listing; left out: %s",
                                 len(files), chunk.number, what, ", ".join(o.key for o in files[:5]))
        self._drop([*gone, *changed])
        return next((c for c in self.chunks if c.number == chunk.number), Chunk(number=chunk.number))

