"""airflow-provider-s3ch: load S3 files into ClickHouse server-side, tuned and measured."""

from __future__ import annotations

__version__ = "0.1.0"

#: The ``clickhouse`` connection form: one copy, for the provider info and the hook.
UI_FIELD_BEHAVIOUR: dict[str, object] = {
    "hidden_fields": [],
    "relabeling": {"schema": "Database", "login": "User"},
    "placeholders": {
        "host": "clickhouse.example.com",
        "port": "9000 (9440 with secure)",
        "schema": "default",
        "login": "default",
        "extra": '{"secure": false, "cluster": "default", "region": "eu-west-3", '
        '"s3_endpoint_url": "http://minio:9000"}',
    },
}


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
                "hook-name": "ClickHouse",
                "connection-type": "clickhouse",
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
                "conn-fields": {
                    "secure": {"label": "TLS (secure)", "schema": {"type": ["boolean", "null"], "default": False}},
                    "cluster": {
                        "label": "Cluster",
                        "schema": {"type": ["string", "null"]},
                        "description": "the cluster for distributed loads, as in system.clusters",
                    },
                    "region": {
                        "label": "Region",
                        "schema": {"type": ["string", "null"]},
                        "description": "where the server runs (e.g. eu-west-3): enables the bucket region check",
                    },
                    "s3_endpoint_url": {
                        "label": "S3 endpoint as ClickHouse reaches it",
                        "schema": {"type": ["string", "null"]},
                        "description": "when it differs from the worker's (MinIO, VPC endpoint)",
                    },
                },
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
