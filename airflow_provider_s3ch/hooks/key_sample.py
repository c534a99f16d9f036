"""The servers' side of a text load's sample for the block rule (:mod:`airflow_provider_s3ch.core.key_sample`):
the first bytes of a file from S3, and the engine's answer over the first rows of files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from airflow_provider_s3ch.hooks.quiet import quiet_loggers

if TYPE_CHECKING:
    from airflow_provider_s3ch.core.sql import RenderedSQL
    from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook


def read_head(client: Any, bucket: str, key: str, size: int) -> bytes | None:
    """The first ``size`` bytes of an object (all of a smaller one); None where S3 refuses the read."""
    try:
        return client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{size - 1}")["Body"].read()
    except (BotoCoreError, ClientError):
        return None


def sample_rows(hook: ClickHouseHook, statement: RenderedSQL) -> list[tuple[Any, ...]]:
    """Run the sample's ``SELECT`` of S3 files: it holds S3 credentials, so clickhouse-driver's logger is held
    back (nothing of it is logged)."""
    with quiet_loggers("clickhouse_driver"):
        return [tuple(row) for row in hook.execute(statement.sql, settings=statement.settings)]
