"""Sensors of the provider."""

from __future__ import annotations

from airflow_provider_s3ch.sensors.s3_glob import S3GlobSensor

__all__ = ["S3GlobSensor"]
