"""Operators of the provider."""

from __future__ import annotations

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

__all__ = ["S3ToClickHouseOperator"]
