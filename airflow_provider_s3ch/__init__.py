"""airflow-provider-s3ch: load S3 files into ClickHouse server-side, tuned and measured."""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict[str, object]:
    """Airflow's provider metadata (entry point ``apache_airflow_provider``)."""
    return {
        "package-name": "airflow-provider-s3ch",
        "name": "S3 to ClickHouse",
        "description": "Load files from S3 into ClickHouse with a tuned server-side INSERT ... SELECT FROM s3().",
        "versions": [__version__],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_s3ch.hooks.clickhouse.ClickHouseHook",
                "connection-type": "clickhouse",
            }
        ],
        "hooks": [
            {
                "integration-name": "ClickHouse",
                "python-modules": ["airflow_provider_s3ch.hooks.clickhouse"],
            }
        ],
        "operators": [
            {
                "integration-name": "ClickHouse",
                "python-modules": ["airflow_provider_s3ch.operators.s3_to_clickhouse"],
            }
        ],
        "transfers": [
            {
                "source-integration-name": "Amazon Simple Storage Service (S3)",
                "target-integration-name": "ClickHouse",
                "python-module": "airflow_provider_s3ch.operators.s3_to_clickhouse",
            }
        ],
    }
