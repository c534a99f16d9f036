"""One real ClickHouse node: the chdb-core engine serving the native and HTTP protocols.

Run as ``python -m airflow_provider_s3ch.local.node WORKDIR``. ``WORKDIR`` holds the
``config.xml`` that :class:`~airflow_provider_s3ch.local.stack.LocalStack` wrote
(ports, data path, ``query_log``, ``remote_servers``, users). The engine runs as
clickhouse-local inside this process; ``SYSTEM START LISTEN`` opens the listeners,
and a long ``sleepEachRow`` query keeps them open. Ending the process stops the node.
"""

from __future__ import annotations

import os
import sys

KEEP_ALIVE = (
    "SYSTEM START LISTEN TCP; SYSTEM START LISTEN HTTP; "
    "SELECT sleepEachRow(1) FROM numbers(1000000000) "
    "SETTINGS function_sleep_max_microseconds_per_block = 0, max_block_size = 1, max_execution_time = 0"
)


def main(argv: list[str] | None = None) -> int:
    """Serve until killed.

    :param argv: ``[WORKDIR]``.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m airflow_provider_s3ch.local.node WORKDIR", file=sys.stderr)
        return 2
    workdir = os.path.abspath(args[0])
    # chdb's import-time probe reads ./config.xml: import it from a neutral directory first.
    os.chdir(os.path.dirname(workdir))
    import chdb._chdb as engine

    os.chdir(workdir)
    engine.query(KEEP_ALIVE, "TabSeparated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
