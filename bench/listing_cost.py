"""What watching a bucket costs in S3 requests: the listing watcher's LIST calls an hour, and a run's requests.

``python -m bench.listing_cost`` seeds the local S3 server (moto) with ``--objects`` files (100,000 by default)
under one prefix, with keys that sort by arrival (``landing/<sequence>.csv``), then drives the listing
watcher's own :meth:`~airflow_provider_s3ch.triggers.s3_events.S3ListingEventTrigger.look` as its ``run`` does,
for one hour of looks (``3600 / poll_interval``), one new file landing every ``--every`` seconds:

- **cursor**: ``keys_sort_by_arrival=True`` with a full listing every ``full_listing_every`` looks (several
  values): the LIST requests of the hour, and whether every new file was handed on;
- **whole prefix**: ``keys_sort_by_arrival=False``: every look lists the whole prefix; a few looks are made and
  the hour is their cost times the looks of an hour (the cost of a look does not change within the hour).

The clock is the looks' count, not the wall: an hour of looks is run back to back (what a look lists does not
depend on when it runs). Each LIST is counted as S3 receives it (boto3's ``before-call`` event), and the formula
``looks + full listings x ceil(objects / 1000)`` is printed beside it.

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


def hour(stack: LocalStack, objects: int, *, poll: float, every: float, sort_by_arrival: bool,
         full_every: int, looks: int | None = None) -> dict[str, Any]:
    """One hour of looks (or ``looks`` of them): LIST requests, full listings, files handed on."""
    from airflow_provider_s3ch.triggers import s3_events

    trigger = s3_events.S3ListingEventTrigger(s3_uri=f"s3://{BUCKET}/{PREFIX}*.csv", poll_interval=poll,
                                    keys_sort_by_arrival=sort_by_arrival, full_listing_every=full_every)
    calls: list[str] = []
    trigger.look()  # the first look of a trigger lists everything (its start); not counted: once per life
    trigger.cursor.looks, trigger.cursor.start_after = 1, None
    first = trigger.look()
    trigger.cursor.emitted.update((f.key, f.etag) for f in first.files)
    trigger.cursor.start_after = first.last_key
    listed = s3_events.list_pages

    def counted(*args: Any) -> Any:  # one page is one ListObjectsV2 request
        for page in listed(*args):
            calls.append("list")
            yield page

    s3_events.list_pages = counted
    per_hour = round(3600 / poll)
    n_looks = per_hour if looks is None else looks
    put, handed, full, landed = stack.s3_client(), [], 0, 0
    for n in range(n_looks):
        if (n * poll) // every != ((n + 1) * poll) // every:  # a file lands within this poll interval
            key = f"{PREFIX}{objects + landed:09d}.csv"
            put.put_object(Bucket=BUCKET, Key=key, Body=b"new,x\n")
            landed += 1
        look = trigger.look()
        full += look.full
        handed.extend(f.key for f in look.files)
        trigger.cursor.emitted.update((f.key, f.etag) for f in look.files)
        trigger.cursor.looks += 1
        trigger.cursor.start_after = look.last_key
    s3_events.list_pages = listed
    scale = per_hour / n_looks
    pages = math.ceil((objects + landed) / 1000)
    return {
        "mode": "cursor" if sort_by_arrival else "whole prefix", "poll_interval_s": poll,
        "full_listing_every": full_every if sort_by_arrival else 1, "looks_run": n_looks, "looks_per_hour": per_hour,
        "list_requests": len(calls), "list_requests_per_hour": round(len(calls) * scale),
        "full_listings_per_hour": round(full * scale),
        "formula_per_hour": round(per_hour - full * scale + full * scale * pages) if sort_by_arrival
        else per_hour * pages,
        "files_landed": landed, "files_handed_on": len(set(handed)),
        "every_new_file_handed_on_once": sorted(handed) == [f"{PREFIX}{objects + i:09d}.csv" for i in range(landed)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--poll", type=float, default=10.0, help="the watcher's poll_interval, seconds")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between two new files")
    parser.add_argument("--full-every", type=int, nargs="+", default=[30, 360])
    parser.add_argument("--out", type=Path, default=Path("bench/results/listing_cost.json"))
    args = parser.parse_args(argv)
    with LocalStack(nodes=1) as stack, stack.environ():
        stack.create_bucket(BUCKET)
        seeded = seed(stack, args.objects)
        print(f"seeded {args.objects} objects in {seeded:.0f} s")
        rows, landed = [], 0
        for n in args.full_every:  # each hour starts with the files the hours before put
            rows.append(hour(stack, args.objects + landed, poll=args.poll, every=args.every, sort_by_arrival=True,
                             full_every=n))
            rows[-1]["objects_at_start"] = args.objects + landed
            landed += rows[-1]["files_landed"]
        whole = hour(stack, args.objects + landed, poll=args.poll, every=args.every, sort_by_arrival=False,
                     full_every=1, looks=3)
        whole["objects_at_start"] = args.objects + landed
        rows.append(whole)
    result = {"machine": platform.node(), "objects": args.objects, "new_file_every_s": args.every, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("| mode | poll | full listing every | LIST / hour (measured) | formula | new files handed on |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['poll_interval_s']:.0f} s | {r['full_listing_every']} looks | "
              f"{r['list_requests_per_hour']:,} | {r['formula_per_hour']:,} | "
              f"{r['files_handed_on']}/{r['files_landed']} "
              f"{'ok' if r['every_new_file_handed_on_once'] else 'MISSED'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
