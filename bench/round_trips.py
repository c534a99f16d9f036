"""Round trips to ClickHouse: what each statement costs with the server a network away.

``python -m bench.round_trips`` starts a local ClickHouse, puts a delaying TCP proxy in front of it
(bench/tcp_delay.py, each round trip ``rtt_ms`` longer) and times statements sent back to back, as a load
sends them, with clickhouse-driver's own client (a ping and its pong before every statement on an open
connection) and with the provider's (hooks/native.py: no ping on a connection that answered within
``PING_AFTER_IDLE_S``). It prints milliseconds per statement and writes ``bench/results/round_trips.json``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: The round trips the proxy adds (ms): loopback, a neighbouring zone, another region.
RTTS = (0.0, 2.0, 10.0, 30.0)

#: Statements per run, and runs per client and distance.
STATEMENTS, RUNS = 12, 5


def _per_statement_ms(client: Any) -> float:
    client.execute("SELECT 0")  # connected, and its answer received: the statements below follow it
    began = time.monotonic()
    for n in range(STATEMENTS):
        client.execute("SELECT %(n)s", {"n": n})
    return (time.monotonic() - began) * 1000 / STATEMENTS


def main() -> None:
    from clickhouse_driver import Client

    from airflow_provider_s3ch.hooks.native import native_client
    from airflow_provider_s3ch.local import LocalStack

    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "statements": STATEMENTS,
                           "runs": RUNS, "rows": []}
    with LocalStack(nodes=1) as stack:
        port = stack.nodes[0].tcp_port
        for rtt in RTTS:
            # The proxy in its own process: it shares no interpreter lock with the clients it delays.
            proxy = subprocess.Popen([sys.executable, "-m", "bench.tcp_delay", f"127.0.0.1:{port}", str(rtt)],
                                     stdout=subprocess.PIPE, text=True)
            try:
                proxy_port = int(proxy.stdout.readline()) if proxy.stdout else 0
                row: dict[str, Any] = {"rtt_ms": rtt}
                times: dict[str, list[float]] = {"driver": [], "provider": []}
                for _ in range(RUNS):  # interleaved
                    for kind, make in (("driver", Client), ("provider", native_client)):
                        client = make("127.0.0.1", port=proxy_port, user=stack.user, password=stack.password)
                        try:
                            times[kind].append(_per_statement_ms(client))
                        finally:
                            client.disconnect()
                for kind, values in times.items():
                    row[f"{kind}_ms"] = round(statistics.median(values), 2)
                row["saved_ms"] = round(row["driver_ms"] - row["provider_ms"], 2)
                out["rows"].append(row)
                print(f"RTT {rtt:>4g} ms: {row['driver_ms']:7.2f} ms a statement with the driver's client, "
                      f"{row['provider_ms']:7.2f} ms with the provider's ({row['saved_ms']:.2f} ms less)", flush=True)
            finally:
                proxy.kill()
    path = Path("bench/results/round_trips.json")
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written: {path}")


if __name__ == "__main__":
    main()
