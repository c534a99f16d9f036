"""airflow-provider-s3ch: load S3 files into ClickHouse server-side, tuned and measured."""

from __future__ import annotations

__version__ = "0.1.0"

#: This provider's connection type: ClickHouse's native protocol (clickhouse-driver, ports 9000/9440).
#: ``clickhouse`` is the type of Apache Airflow's own ClickHouse provider (HTTP, ports 8123/8443): the
#: hook reads such connections too, but this provider does not register it.
NATIVE_CONN_TYPE = "clickhouse_native"

#: The ``clickhouse_native`` connection form's extra fields (Airflow's ``conn-fields``): one copy, for
#: the provider info and the hook's form methods.
CONN_FIELDS: dict[str, dict[str, object]] = {
    "secure": {
        "label": "TLS (secure)",
        "schema": {"type": ["boolean", "null"], "default": False},
        "description": "connect with TLS; the port defaults to 9440 instead of 9000",
    },
    "verify": {
        "label": "Verify the server's certificate",
        "schema": {"type": ["boolean", "null"]},
        "description": "with TLS; default true",
    },
    "ca_certs": {
        "label": "CA certificates file",
        "schema": {"type": ["string", "null"]},
        "description": "with TLS: a file of CA certificates to verify the server against",
    },
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
    "workload": {
        "label": "Workload",
        "schema": {"type": ["string", "null"]},
        "description": "the server's workload loads run in (workload scheduling: they wait for their memory)",
    },
    "http_port": {
        "label": "HTTP port (deferrable loads)",
        "schema": {"type": ["integer", "null"]},
        "description": (
            "the server's HTTP port, where deferrable loads start their insert; default 8123 (8443 with TLS)"
        ),
    },
    "s3_endpoint_url": {
        "label": "S3 endpoint as ClickHouse reaches it",
        "schema": {"type": ["string", "null"]},
        "description": "when it differs from the worker's (MinIO, VPC endpoint)",
    },
    "connect_timeout": {
        "label": "Connect timeout (seconds)",
        "schema": {"type": ["integer", "null"]},
        "description": "default 10",
    },
    "send_receive_timeout": {
        "label": "Send/receive timeout (seconds)",
        "schema": {"type": ["integer", "null"]},
        "description": "default 3600: a load's INSERT runs as one query",
    },
}

#: The ``clickhouse_native`` connection form's standard fields, as a hook's ``get_ui_field_behaviour``
#: returns them (the provider info spells the keys in kebab case).
UI_FIELD_BEHAVIOUR: dict[str, object] = {
    "hidden_fields": [],
    "relabeling": {"schema": "Database", "login": "User"},
    "placeholders": {
        "host": "clickhouse.example.com",
        "port": "9000 (9440 with TLS): the native protocol, not HTTP's 8123",
        "schema": "default",
        "login": "default",
        "extra": '{"secure": false, "cluster": "default", "region": "eu-west-3", '
        '"s3_endpoint_url": "http://minio:9000"}',
    },
}


#: The ``clickhouse://`` scheme's normalizer, factory and OpenLineage name (airflow_provider_s3ch.assets).
_ASSET_URIS = {
    "schemes": ["clickhouse"],
    "handler": "airflow_provider_s3ch.assets.sanitize_uri",
    "factory": "airflow_provider_s3ch.assets.create_asset",
    "to_openlineage_converter": "airflow_provider_s3ch.assets.convert_asset_to_openlineage",
}


def get_provider_info() -> dict[str, object]:
    """Airflow's provider metadata (entry point ``apache_airflow_provider``)."""
    return {
        "package-name": "airflow-provider-s3ch",
        "name": "S3 to ClickHouse",
        "description": "Load files from S3 into ClickHouse with a tuned server-side INSERT ... SELECT FROM s3().",
        "versions": [__version__],
        "asset-uris": [_ASSET_URIS],
        "dataset-uris": [_ASSET_URIS],  # the same, by Airflow 2's name
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_s3ch.hooks.clickhouse.ClickHouseHook",
                "hook-name": "ClickHouse (native protocol)",
                "connection-type": NATIVE_CONN_TYPE,
                "ui-field-behaviour": {key.replace("_", "-"): value for key, value in UI_FIELD_BEHAVIOUR.items()},
                "conn-fields": CONN_FIELDS,
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
        "sensors": [
            {
                "integration-name": "Amazon Simple Storage Service (S3)",
                "python-modules": ["airflow_provider_s3ch.sensors.s3_glob"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Amazon Simple Storage Service (S3)",
                "python-modules": ["airflow_provider_s3ch.triggers.s3_glob", "airflow_provider_s3ch.triggers.s3_events",
                                   "airflow_provider_s3ch.triggers.s3_notifications"],
            },
            {
                "integration-name": "ClickHouse",
                "python-modules": ["airflow_provider_s3ch.triggers.load"],
            },
        ],
        "transfers": [
            {
                "source-integration-name": "Amazon Simple Storage Service (S3)",
                "target-integration-name": "ClickHouse",
                "python-module": "airflow_provider_s3ch.operators.s3_to_clickhouse",
            }
        ],
    }
