"""A real local ClickHouse and S3 for demos, tests and users testing their own DAGs."""

from __future__ import annotations

from airflow_provider_s3ch.local.stack import DEFAULT_BUCKET, DEFAULT_CLUSTER, DEFAULT_REGION, LocalStack

__all__ = ["DEFAULT_BUCKET", "DEFAULT_CLUSTER", "DEFAULT_REGION", "LocalStack"]
