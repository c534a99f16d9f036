"""The benchmark harness for airflow-provider-s3ch (see bench/README.md)."""
