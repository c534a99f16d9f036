"""What the partition-safe ``replace_partitions`` costs: a late file's load with the ledger, three ways.

Three monthly CSV files (``ROWS`` rows each, one partition each) are loaded by three runs; then a late
file for the first month is loaded:

- ``append``: the late file's rows join the partition (no rebuild; the baseline of a ledger load);
- ``replace, own partition``: a late file of a month no earlier file wrote (two ledger reads more);
- ``replace, shared partition``: the late file's month holds an earlier file: the partition is rebuilt
  (the earlier file read again).

Each line: the task's wall time, the statements the server logged for the load, the bytes the server
read from S3 (the insert and the rebuild), the rows in the target after it, and whether they equal
ClickHouse's own read of the files. Run: ``python -m bench.ledger_rebuild`` (``--rows N``).
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

BUCKET = "s3ch-bench-rebuild"
STRUCTURE = "file UInt16, id UInt32, v String"


def _put(s3: Any, prefix: str, n: int, rows: int) -> None:
    body = "".join(f"{n},{n * 10_000_000 + i},value-{i % 997}-{'x' * (i % 50)}\n" for i in range(rows))
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}f-{n:02d}.csv", Body=body.encode())


def _run(stack: Any, table: str, uri: str, mode: str) -> dict[str, Any]:
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
    from bench.common import fake_context

    op = S3ToClickHouseOperator(task_id="late", s3_uri=uri, table=table, format="CSV", structure=STRUCTURE,
                                skip_loaded=True, mode=mode)
    client = stack.clickhouse_client()
    since = int(client.execute("SELECT toUnixTimestamp64Micro(now64(6))")[0][0])
    started = time.monotonic()
    result = op.execute(fake_context(f"rebuild-{uuid.uuid4().hex[:8]}"))
    wall = time.monotonic() - started
    client.execute("SYSTEM FLUSH LOGS")
    statements, read_bytes = client.execute(
        "SELECT countIf(type = 'QueryStart'), sumIf(read_bytes, type = 'QueryFinish' AND query ILIKE 'INSERT%%s3(%%') "
        "FROM system.query_log WHERE event_time_microseconds >= fromUnixTimestamp64Micro(%(s)s) "
        "AND query NOT ILIKE '%%system.query_log%%' AND client_name ILIKE '%%s3ch%%'", {"s": since})[0]
    return {"wall_s": wall, "statements": int(statements), "read_bytes": int(read_bytes),
            "phases_ms": result.get("phases_ms"), "written_rows": result["written_rows"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    args = parser.parse_args()
    from airflow_provider_s3ch.local import LocalStack

    with LocalStack(nodes=1) as stack, stack.environ():
        stack.create_bucket(BUCKET)
        s3, client = stack.s3_client(), stack.clickhouse_client()
        cases = [("append", "append", 11), ("replace, own partition", "replace_partitions", 41),
                 ("replace, shared partition", "replace_partitions", 11)]
        print(f"{'case':<28}{'wall s':>8}{'statements':>12}{'S3 bytes read':>16}{'rows':>10}  exact  phases_ms")
        for name, mode, late in cases:
            prefix = f"rb-{uuid.uuid4().hex[:6]}/"
            table = f"default.rb_{uuid.uuid4().hex[:6]}"
            client.execute(f"CREATE TABLE {table} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY intDiv(file, 10) "
                           "ORDER BY id")
            for n in (10, 20, 30):
                _put(s3, prefix, n, args.rows)
                _run(stack, table, f"s3://{BUCKET}/{prefix}f-{n // 10}*.csv", mode)
            _put(s3, prefix, late, args.rows)
            out = _run(stack, table, f"s3://{BUCKET}/{prefix}f-{late // 10}*.csv", mode)
            rows, digest = client.execute(f"SELECT count(), sum(cityHash64(*)) FROM {table}")[0]
            clean = client.execute(
                f"SELECT count(), sum(cityHash64(*)) FROM s3('{stack.s3_endpoint}/{BUCKET}/{prefix}*.csv', "
                f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'CSV', '{STRUCTURE}')")[0]
            print(f"{name:<28}{out['wall_s']:>8.2f}{out['statements']:>12}{out['read_bytes']:>16,}{rows:>10,}  "
                  f"{(rows, digest) == tuple(clean)!s:<5}  {out['phases_ms']}")


if __name__ == "__main__":
    main()
