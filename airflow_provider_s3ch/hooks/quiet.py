"""Hold back libraries' DEBUG lines that carry secrets while the provider calls them.

clickhouse-driver logs every statement (the S3 credentials of ``s3()`` included) and botocore logs
every request's headers (``x-amz-security-token`` included) at DEBUG level. Airflow masks the
secrets it knows of in the task log file, but not in every handler a user may attach (the console
of ``airflow dags test``, a DEBUG handler of their own).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

#: The loggers whose DEBUG lines carry secrets.
SECRET_BEARING_LOGGERS = ("clickhouse_driver", "botocore", "boto3", "s3transfer", "urllib3")


@contextlib.contextmanager
def quiet_loggers(*names: str) -> Iterator[None]:
    """Raise the named loggers (all of :data:`SECRET_BEARING_LOGGERS` by default) to INFO for the block."""
    loggers = [logging.getLogger(name) for name in names or SECRET_BEARING_LOGGERS]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        if logger.getEffectiveLevel() < logging.INFO:
            logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, level in zip(loggers, saved, strict=True):
            logger.setLevel(level)
