"""Hold back libraries' DEBUG lines that carry secrets while the provider calls them.

clickhouse-driver logs every statement (the S3 credentials of ``s3()`` included) and botocore logs
every request's headers (``x-amz-security-token`` included) at DEBUG level. Airflow masks the
secrets it knows of in the task log file, but not in every handler a user may attach (the console
of ``airflow dags test``, a DEBUG handler of their own).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

#: The loggers whose DEBUG lines carry secrets.
SECRET_BEARING_LOGGERS = ("clickhouse_driver", "botocore", "boto3", "s3transfer", "urllib3")

#: The loggers held back now: name -> (how many blocks hold it, its level before the first). Logger levels are
#: the process's, and a load runs blocks in two threads (the listing, and the server's reads beside it): the
#: last block to end restores the level, not the first.
_held: dict[str, tuple[int, int]] = {}
_lock = threading.Lock()


@contextlib.contextmanager
def quiet_loggers(*names: str) -> Iterator[None]:
    """Raise the named loggers (all of :data:`SECRET_BEARING_LOGGERS` by default) to INFO for the block, in
    whichever thread it runs: while any thread's block holds a logger, it stays raised."""
    names = names or SECRET_BEARING_LOGGERS
    with _lock:
        for name in names:
            held, level = _held.get(name, (0, logging.NOTSET))
            if not held:
                logger = logging.getLogger(name)
                level = logger.level
                if logger.getEffectiveLevel() < logging.INFO:
                    logger.setLevel(logging.INFO)
            _held[name] = (held + 1, level)
    try:
        yield
    finally:
        with _lock:
            for name in names:
                held, level = _held.pop(name)
                if held > 1:
                    _held[name] = (held - 1, level)
                else:
                    logging.getLogger(name).setLevel(level)
