"""Connection arguments for the SQLite metadata database of Airflow's processes on the local stack
(:class:`airflow_provider_s3ch.local.airflow.Airflow`: the live demo, the real-scheduler tests).

The scheduler, the dag-processor, the api-server, the triggerer and the CLI all write to one SQLite file.
SQLite lets one writer at a time and Python's driver gives up after 5 s, which a busy 2-core machine can
exceed ("database is locked" in `airflow backfill create`). A longer busy timeout makes writers wait instead.
Airflow imports this through `[database] sql_alchemy_connect_args`.
"""

CONNECT_ARGS = {"timeout": 120}
