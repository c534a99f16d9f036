"""What watching a bucket costs in S3 requests: the listing watcher's LIST calls an hour, and a run's requests.

``python -m bench.listing_cost`` seeds the local S3 server (moto) with ``--objects`` files (100,000 by default)
under one prefix, with keys that sort by arrival (``landing/<sequence>.csv``), then drives the listing
watcher's own :meth:`~airflow_provider_s3ch.triggers.s3_events.S3ListingEventTrigger.look` as its ``run`` does,
measuring the ListObjectsV2 requests of a full listing (the trigger's first look) and of ``--cursor-looks``
looks from the cursor (``keys_sort_by_arrival=True``), a new file landing every ``--every-looks`` looks (a minute
at a 10 s poll), and whether each new file was handed on once. A look's requests do not depend on when it runs,
so an hour at ``--poll`` is computed from them: ``(looks - full listings) x a cursor look + full listings x a full
listing``, for each ``--full-every``, and, for keys in any order, every look a full listing.

Writes ``bench/results/listing_cost.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.local import LocalStack

BUCKET = "s3ch-listing-cost"
PREFIX = "landing/"


def seed(stack: LocalStack, objects: int, workers: int = 16) -> float:
    """Put ``objects`` small files, keys in arrival order; the seconds it took."""
    started = time.monotonic()
    client = stack.s3_client()

    def put(n: int) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}{n:09d}.csv", Body=f"{n},x\n".encode())

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(put, range(objects)))
    return time.monotonic() - started


def looks(stack: LocalStack, objects: int, *, cursor_looks: int, every_looks: int) -> dict[str, Any]:
    """The requests of one full listing (the trigger's first look) and of ``cursor_looks`` looks from the cursor,
    a new file landing every ``every_looks`` looks; whether each new file was handed on once."""
    from airflow_provider_s3ch.triggers import s3_events

    trigger = s3_events.S3ListingEventTrigger(s3_uri=f"s3://{BUCKET}/{PREFIX}*.csv", keys_sort_by_arrival=True,
                                              full_listing_every=10**9)
    calls: list[int] = []
    listed = s3_events.list_pages

    def counted(*args: Any) -> Any:  # one page is one ListObjectsV2 request
        for page in listed(*args):
            calls[-1] += 1
            yield page

    s3_events.list_pages = counted
    try:
        def look() -> Any:
            calls.append(0)
            answer = trigger.look()
            trigger.cursor.emitted.update((f.key, f.etag) for f in answer.files)
            trigger.cursor.looks += 1
            trigger.cursor.start_after = answer.last_key
            return answer

        started = time.monotonic()
        first = look()
        full_s = time.monotonic() - started
        put, handed, landed = stack.s3_client(), [], 0
        started = time.monotonic()
        for n in range(cursor_looks):
            if n % every_looks == 0:
                put.put_object(Bucket=BUCKET, Key=f"{PREFIX}{objects + landed:09d}.csv", Body=b"new,x\n")
                landed += 1
            handed.extend(f.key for f in look().files)
        cursor_s = (time.monotonic() - started) / max(1, cursor_looks)
    finally:
        s3_events.list_pages = listed
    return {"objects": objects, "full_listing_requests": calls[0], "full_listing_files": len(first.files),
            "full_listing_s": round(full_s, 2), "cursor_looks": cursor_looks,
            "cursor_requests": calls[1:], "cursor_look_s": round(cursor_s, 3), "files_landed": landed,
            "every_new_file_handed_on_once": sorted(handed) == [f"{PREFIX}{objects + i:09d}.csv"
                                                                 for i in range(landed)]}


def per_hour(measured: dict[str, Any], poll: float, full_every: int | None) -> dict[str, Any]:
    """An hour of looks at ``poll`` from the measured requests: ``full_every`` None lists the whole prefix at
    every look (keys in any order)."""
    n = round(3600 / poll)
    cursor = max(measured["cursor_requests"], default=1)
    full = measured["full_listing_requests"]
    if full_every is None:
        return {"mode": "whole prefix", "poll_interval_s": poll, "full_listing_every": 1, "looks_per_hour": n,
                "list_requests_per_hour": n * full}
    fulls = math.ceil(n / full_every)
    return {"mode": "cursor", "poll_interval_s": poll, "full_listing_every": full_every, "looks_per_hour": n,
            "full_listings_per_hour": fulls, "list_requests_per_hour": (n - fulls) * cursor + fulls * full}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--poll", type=float, default=10.0, help="the watcher's poll_interval, seconds")
    parser.add_argument("--cursor-looks", type=int, default=30, help="looks from the cursor measured")
    parser.add_argument("--every-looks", type=int, default=6, help="a new file every this many looks (6: a minute)")
    parser.add_argument("--full-every", type=int, nargs="+", default=[30, 360])
    parser.add_argument("--out", type=Path, default=Path("bench/results/listing_cost.json"))
    args = parser.parse_args(argv)
    with LocalStack(nodes=1) as stack, stack.environ():
        stack.create_bucket(BUCKET)
        seeded = seed(stack, args.objects)
        print(f"seeded {args.objects} objects in {seeded:.0f} s", flush=True)
        measured = looks(stack, args.objects, cursor_looks=args.cursor_looks, every_looks=args.every_looks)
    rows = [per_hour(measured, args.poll, n) for n in args.full_every] + [per_hour(measured, args.poll, None)]
    result = {"machine": platform.node(), "seeded_s": round(seeded, 1), "measured": measured, "per_hour": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"one full listing of {args.objects:,} objects: {measured['full_listing_requests']} requests "
          f"({measured['full_listing_s']} s); a look from the cursor: {sorted(set(measured['cursor_requests']))} "
          f"request(s) ({measured['cursor_look_s']} s); new files handed on once: "
          f"{measured['every_new_file_handed_on_once']} ({measured['files_landed']})")
    print("| mode | poll | full listing every | LIST / hour |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['poll_interval_s']:.0f} s | {r['full_listing_every']} looks | "
              f"{r['list_requests_per_hour']:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
