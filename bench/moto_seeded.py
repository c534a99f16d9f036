"""A moto S3 server process whose buckets are filled with tiny objects before it serves.

``python -m bench.moto_seeded PORT REGION BUCKET=COUNT [BUCKET=COUNT ...]``

Putting 100 000 objects through moto's HTTP API takes ~9 minutes here (~190 PUTs/s), so
the listing benchmark seeds moto's own backend in this process (~1 s per 10 000 keys) and then
serves the usual HTTP API: the listing that is measured goes through real HTTP and moto's
real ListObjectsV2, exactly as against the stack's S3 server. Keys are
``o/NNN/obj-NNNNNN.parquet``, 1 byte each, 1000 per ``NNN`` "directory".
"""

from __future__ import annotations

import sys
import time


def key(i: int) -> str:
    return f"o/{i // 1000:03d}/obj-{i:06d}.parquet"


def main(argv: list[str]) -> int:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer

    port, region, specs = int(argv[0]), argv[1], argv[2:]
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    started = time.monotonic()
    for spec in specs:
        bucket, count = spec.split("=")
        backend.create_bucket(bucket, region)
        for i in range(int(count)):
            backend.put_object(bucket, key(i), b"x")
    seeded = time.monotonic() - started
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print(f"ready seeded_s={seeded:.2f}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
