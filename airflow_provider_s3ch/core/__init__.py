"""The pure core: every decision of a load, with no I/O.

Nothing here imports boto3, clickhouse-driver, Airflow or the shells
(:mod:`airflow_provider_s3ch.hooks`, :mod:`airflow_provider_s3ch.operators`); a unit test
walks the imports. The shells gather facts, call these functions, run the statements they
return and raise the provider's Airflow errors (:mod:`airflow_provider_s3ch.errors`).
"""
