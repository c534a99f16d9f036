"""Continuous ingestion: files that land in S3 reach the table within seconds, each exactly once.

An asset watches the landing prefix with two watchers (docs/continuous.md):

- the **notification watcher** reads the bucket's S3 event notifications from an SQS queue: a file
  becomes an asset event about a second after it lands;
- the **listing watcher** lists the prefix from its cursor every ``S3CH_CONTINUOUS_LISTING_POLL``
  seconds, the backstop for a notification that never came (SQS and S3 promise at-least-once, not
  always-once, delivery; on Airflow 3.0 - 3.2 a triggerer that dies may lose a batch).

The DAG runs on the asset's events **or** on a time schedule (``AssetOrTimeSchedule``): a run that no
event triggered lists the whole glob, which bounds the wait of an event that reached no run (a consumed
event is never delivered again). ``max_active_runs=1``: the events that land while a run loads wait for
the next one, which takes them all. Each run loads the files its events name that the file ledger
(``skip_loaded=True``) does not hold, in inserts of at most ``max_files_per_load`` files; a run whose
events name nothing new ends as skipped (``skip_when_empty=True``).

Needs Apache Airflow 3.0 or later (asset watchers); on Airflow 2 the file fails to parse, naming the version.

Configuration (environment variables, read when the file is parsed; the defaults fit the local stack
of ``s3ch-local up`` / ``s3ch-local live``):

=================================  ==================================================================
``S3CH_CONTINUOUS_URI``            the glob of the landing files (``s3://s3ch-sample/landing/*.csv``)
``S3CH_CONTINUOUS_QUEUE_URL``      the SQS queue the bucket notifies (``docs/continuous.md`` has the
                                   setup); empty: the listing watcher alone
``S3CH_CONTINUOUS_LISTING_POLL``   seconds between two looks of the listing watcher (60)
``S3CH_CONTINUOUS_SAFETY_NET``     the time schedule beside the asset, a cron expression (``*/10 * * * *``)
``S3CH_CONTINUOUS_TABLE``          the target table (``default.landing_events``, created if missing)
``S3CH_CONTINUOUS_STRUCTURE``      the files' columns (``file UInt32, id UInt32, v String``)
``S3CH_CONTINUOUS_MAX_FILES``      the most files one insert reads (``max_files_per_load``, 1000)
``S3CH_CONTINUOUS_BATCH_WAIT``     seconds the notification watcher gathers files after a first one (0)
=================================  ==================================================================

Connections: ``clickhouse_native_default`` and ``aws_default`` (its ``endpoint_url`` serves SQS too; on
the local stack, from the ``AIRFLOW_CONN_*`` variables ``s3ch-local up`` prints). On the local stack the
default queue is ``LocalStack.notify_queue("s3ch-sample", "s3ch-landing", prefix="landing/")`` (its server
takes the queue's name from the URL's last part). ``s3ch-local live`` (``make live``) runs this DAG under
Airflow's own scheduler and triggerer, puts a file a second and prints the rows and the lag.
"""

from __future__ import annotations

import datetime
import os

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_s3ch.compat import Asset, AssetOrTimeSchedule, CronTriggerTimetable
from airflow_provider_s3ch.errors import require
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from airflow_provider_s3ch.triggers.s3_events import listing_watcher
from airflow_provider_s3ch.triggers.s3_notifications import notification_watcher

# One message on Airflow 2, before anything else needs what it lacks.
require("continuous ingestion (asset watchers)", "3.0")

URI = os.environ.get("S3CH_CONTINUOUS_URI", "s3://s3ch-sample/landing/*.csv")
QUEUE_URL = os.environ.get("S3CH_CONTINUOUS_QUEUE_URL", "https://sqs.eu-west-3.amazonaws.com/123456789012/s3ch-landing")
LISTING_POLL = float(os.environ.get("S3CH_CONTINUOUS_LISTING_POLL", "60"))
SAFETY_NET = os.environ.get("S3CH_CONTINUOUS_SAFETY_NET", "*/10 * * * *")
TABLE = os.environ.get("S3CH_CONTINUOUS_TABLE", "default.landing_events")
STRUCTURE = os.environ.get("S3CH_CONTINUOUS_STRUCTURE", "file UInt32, id UInt32, v String")
MAX_FILES = int(os.environ.get("S3CH_CONTINUOUS_MAX_FILES", "1000"))
BATCH_WAIT = float(os.environ.get("S3CH_CONTINUOUS_BATCH_WAIT", "0"))

watchers = [
    # The backstop: from its cursor (the keys carry their arrival time, so new keys sort last), the whole
    # prefix every 30th look.
    listing_watcher("landing_listing", s3_uri=URI, poll_interval=LISTING_POLL, keys_sort_by_arrival=True,
                    full_listing_every=30),
]
if QUEUE_URL:
    watchers.insert(0, notification_watcher("landing_sqs", queue_url=QUEUE_URL, s3_uri=URI, batch_wait=BATCH_WAIT))

landing = Asset(name="s3ch_landing", uri=URI.rsplit("/", 1)[0] + "/", watchers=watchers)

with DAG(
    dag_id="s3_to_clickhouse_continuous",
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable(SAFETY_NET, timezone="UTC"), assets=[landing]),
    start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    max_active_runs=1,
    # While ClickHouse is down the run's task retries with a growing delay (10 s, 20 s, ... at most 5 min: about
    # 20 min in all) rather than every 10 s; the events that land meanwhile wait (max_active_runs=1) and the
    # next run takes them all, in inserts of at most max_files_per_load files.
    default_args={"retries": 8, "retry_delay": datetime.timedelta(seconds=10), "retry_exponential_backoff": True,
                  "max_retry_delay": datetime.timedelta(minutes=5)},
    tags=["s3ch", "example", "continuous"],
) as dag:
    S3ToClickHouseOperator(
        task_id="load_landed_files",
        s3_uri=URI,  # the watchers' glob
        table=TABLE,
        format="CSV",
        structure=STRUCTURE,
        create_table="if_missing",
        order_by="id",
        skip_loaded=True,  # the ledger decides what is new: an event is a hint
        files_from="events",  # the files the run's events name; a run no event triggered lists the glob
        skip_when_empty=True,  # events that name only loaded files: the run ends as skipped
        on_bad_file="set_aside",  # a file the server cannot parse is recorded and left out; the others load
        max_files_per_load=MAX_FILES,
    )
