"""ClickHouse's S3Queue engine beside the provider's continuous ingestion, measured on the same local stack.

``LocalStack(keeper=True)`` (one ClickHouse 26.9 node, moto's S3, Debian's ZooKeeper), ``system.s3queue_log`` and
``system.part_log`` turned on. S3Queue's sections (:mod:`bench.s3queue_scenarios`, :mod:`bench.s3queue_load`):
latency (unordered and ordered, polling at 26.9's defaults and tuned, then files after an idle gap), faults
(SIGKILLs of the node, a file larger than an insert block killed mid-file, keys that sort before processed ones,
re-uploads, a parse error), throughput (small files, a larger set) and cost (S3 requests an hour with many objects
under the prefix, the node's RSS). With ``--provider`` the provider's side of the fault scenarios runs too, through
the live stream (:mod:`bench.continuous_scenarios`: ``continuous_scenarios.json``); its other figures are read from
its own results (``continuous_latency.json``, ``continuous_faults*.json``, ``continuous_load.json``,
``listing_cost.json``), not run again. Writes ``continuous_compared.json``, ``.md`` and ``.png`` into ``--out``
(``bench/results``).

    .venv/bin/python -m bench.s3queue_peer            # the aimed sizes (10,000 small files, 1 GB, 100,000 objects)
    .venv/bin/python -m bench.s3queue_peer --quick    # a few files each (~6 min on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.local import LocalStack
from bench import s3queue_load as load
from bench import s3queue_scenarios as sc
from bench.s3queue_report import render_md, render_png

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
SECTIONS = ("latency", "idle", "faults", "throughput", "cost")


def quick_kill(stack: LocalStack, say: sc.Say = print) -> dict[str, Any]:
    """The CI check (tests/integration/test_keeper.py runs it on its stack): an unordered queue (tuned polling),
    files 1-3 loaded; files 4-6 put and the node SIGKILLed (within 1 s of S3Queue processing one) and started
    again on its data; files 7-9 put after it; each file's times in the target after up to 30 s."""
    q = sc.Queue(stack, f"ci_{int(time.time())}", "unordered", "tuned").create()
    try:
        for n in (1, 2, 3):
            q.put(n)
        before = q.wait([1, 2, 3], 30)
        for n in (4, 5, 6):
            q.put(n)
        processing, partial, in_flight = sc.hunt(q, 1.0)
        began = time.monotonic()
        stack.restart_node(0, kill=True)
        restart_s = round(time.monotonic() - began, 1)
        for n in (7, 8, 9):
            q.put(n)
        q.wait(range(1, 10), 30)
        time.sleep(2)  # a duplicate that lands after the first load
        out = q.outcome(range(1, 10))
        out.update(engine=q.engine_states(), loaded_before_kill=sorted(before), after_restart=[7, 8, 9],
                   kill={"processing": processing, "partial_in_target": partial, "in_flight": in_flight,
                         "restart_s": restart_s})  # fmt: skip
    finally:
        q.drop()
    say(f"quick kill: {out['once']}/9 once, lost {out['lost']}, duplicated {out['duplicated']}")
    return out


def run(args: argparse.Namespace, say: sc.Say = print) -> dict[str, Any]:
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    out: dict[str, Any] = {}
    with LocalStack(nodes=1, keeper=True) as stack:
        stack.create_bucket(sc.BUCKET)
        sc.enable_logs(stack)
        out["clickhouse"] = stack.clickhouse_client().execute("SELECT version()")[0][0]
        if "latency" in sections:
            out["latency"] = [sc.latency(stack, mode, polling, args.files, args.interval, say=say)
                              for mode in ("unordered", "ordered") for polling in sc.POLLING]  # fmt: skip
        if "idle" in sections:
            out["idle"] = sc.idle_gaps(stack, args.gaps, args.gap_repeats, say=say)
        if "faults" in sections:
            out["faults"] = {
                "kills": [sc.kills(stack, m, args.kill_files, args.kill_interval, args.kills, rows=args.kill_rows,
                                   drain=args.drain, say=say) for m in ("unordered", "ordered")],
                "large_file": [sc.large_file_kill(stack, m, args.large_rows, timeout=args.drain, say=say)
                               for m in ("unordered", "ordered")],
                "out_of_order": [sc.out_of_order(stack, m, say=say) for m in ("unordered", "ordered")],
                "reupload": [sc.reupload(stack, m, say=say) for m in ("unordered", "ordered")],
                "parse_error": [sc.parse_error(stack, m, say=say) for m in ("unordered", "ordered")],
            }  # fmt: skip
        if "throughput" in sections:
            out["throughput"] = {
                "small": load.throughput_small(stack, args.small_files, 500, ["unordered", "ordered"], say=say),
                "large": load.throughput_large(stack, args.large_mb, say=say),
            }
        if "cost" in sections:
            out["cost"] = load.cost(stack, args.cost_objects, args.cost_minutes, list(sc.POLLING), say=say)
    return out


def provider_figures(results: Path) -> dict[str, Any]:
    """The provider's own measured figures, from the result files its benchmarks wrote (each with its source)."""

    def read(name: str) -> dict[str, Any] | None:
        path = results / name
        return json.loads(path.read_text()) if path.is_file() else None

    out: dict[str, Any] = {}
    if lat := read("continuous_latency.json"):
        out["latency"] = {"source": "bench/results/continuous_latency.json", "started": lat.get("started"),
                          "modes": [{k: m.get(k) for k in ("mode", "watchers", "listing_poll_s", "files_put",
                                                           "exactly_once", "p50_s", "p95_s", "max_s", "latencies_s")}
                                    for m in lat["modes"]]}  # fmt: skip
    for name in ("continuous_faults_crashes_full.json", "continuous_faults.json"):
        faults = read(name)
        crash = (faults or {}).get("scenarios", {}).get("crashes")
        if crash:
            out["kills"] = {"source": f"bench/results/{name}", **{k: crash.get(k) for k in (
                "files_put", "kills", "kills_by_kind", "exactly_once", "missing", "doubled", "p95_s")}}  # fmt: skip
            break
    if (batch := read("continuous_load.json")) is not None:
        for s in batch.get("scenarios", []):
            if s.get("scenario") == "batching":
                out["batching"] = {"source": "bench/results/continuous_load.json", **{k: s.get(k) for k in (
                    "files", "rows_per_file", "file_bytes", "runs_total", "inserts", "drain_after_last_put_s",
                    "exactly_once")}}  # fmt: skip
    if sc := read("continuous_scenarios.json"):
        out["scenarios"] = {"source": "bench/results/continuous_scenarios.json", **{k: sc.get(k) for k in (
            "files", "main", "parse_error", "reupload", "late_keys", "large_file", "idle", "memory_mib",
            "ok")}}  # fmt: skip
    if tp := read("continuous_throughput.json"):
        out["throughput"] = {"source": "bench/results/continuous_throughput.json", **{k: tp.get(k) for k in (
            "started", "order", "small", "large")}}  # fmt: skip
    if cost := read("listing_cost.json"):
        out["cost"] = {"source": "bench/results/listing_cost.json", "objects": cost["measured"]["objects"],
                       "per_hour": cost["per_hour"]}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small run: a few files in each section")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"which sections ({','.join(SECTIONS)})")
    p.add_argument("--files", type=int, default=60, help="latency: files per mode and setting (60)")
    p.add_argument("--interval", type=float, default=1.0, help="latency: seconds between two files (1)")
    p.add_argument("--gaps", default="5,60", help="idle gaps in seconds (5,60)")
    p.add_argument("--gap-repeats", type=int, default=2, help="files put after each idle gap (2)")
    p.add_argument("--kills", type=int, default=10, help="SIGKILLs of the node per mode (10)")
    p.add_argument("--kill-files", type=int, default=40, help="files put while the node is killed (40)")
    p.add_argument("--kill-interval", type=float, default=0.5, help="seconds between them (0.5)")
    p.add_argument("--kill-rows", type=int, default=20000, help="rows per file there, so that a kill lands mid-file")
    p.add_argument("--large-rows", type=int, default=2_500_000, help="rows of the file killed mid-file (2.5 M)")
    p.add_argument("--drain", type=float, default=60.0, help="after the faults, how long to wait for the files (60 s)")
    p.add_argument("--small-files", type=int, default=10_000, help="throughput: small files (10,000)")
    p.add_argument("--large-mb", type=int, default=1024, help="throughput: MB of larger files (1024)")
    p.add_argument("--cost-objects", type=int, default=100_000, help="cost: objects under the prefix (100,000)")
    p.add_argument("--cost-minutes", type=float, default=3.0, help="cost: minutes per polling setting (3)")
    p.add_argument("--provider", action="store_true",
                   help="also run the provider's side of the fault scenarios through the live stream "
                        "(bench.continuous_scenarios, ~5 min; --quick: 0.5 M rows in the large file)")
    p.add_argument("--render-only", action="store_true",
                   help="no run: the report again from the S3Queue figures on record and the provider's result files")
    p.add_argument("--note", default="", help="a note kept in the result")
    p.add_argument("--out", type=Path, default=OUT, help="the folder of the results (bench/results)")
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.gaps, args.gap_repeats, args.kills, args.kill_files = 8, "5", 1, 2, 10
        args.small_files, args.large_mb, args.cost_objects, args.cost_minutes = 300, 64, 2000, 1.0
        args.large_rows, args.drain = 1_500_000, 30.0
    args.gaps = [float(g) for g in str(args.gaps).split(",") if g]
    if args.render_only:
        return render_again(args.out)
    started = time.time()
    s3queue = run(args, say=lambda line: print(f"[s3queue] {line}", flush=True))
    if args.provider:
        from bench import continuous_scenarios

        sc_args = argparse.Namespace(files=10 if args.quick else 40, interval=1.0, drain_timeout=300.0,
                                     big_rows=500_000 if args.quick else args.large_rows)
        scenarios = continuous_scenarios.run(sc_args, say=lambda line: print(f"[provider] {line}", flush=True))
        scenarios["command"] = "python -m bench.s3queue_peer --provider"
        (args.out / "continuous_scenarios.json").write_text(json.dumps(scenarios, indent=2, default=str) + "\n")
    sizes = {k: getattr(args, k) for k in ("files", "interval", "gaps", "gap_repeats", "kills", "kill_files",
                                           "kill_interval", "kill_rows", "large_rows", "drain", "small_files",
                                           "large_mb", "cost_objects", "cost_minutes")}  # fmt: skip
    result = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)), "machine": platform.platform(),
        "command": shlex.join(["python", "-m", "bench.s3queue_peer", *(argv if argv is not None else sys.argv[1:])]),
        "quick": args.quick, "sizes": sizes, "note": args.note, "duration_s": round(time.time() - started, 1),
        "s3queue": s3queue, "provider": provider_figures(OUT),
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "continuous_compared.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (args.out / "continuous_compared.md").write_text(render_md(result))
    render_png(result, args.out / "continuous_compared.png")
    print(f"written: {args.out / 'continuous_compared.json'}, .md, .png")
    return 0


def render_again(out: Path) -> int:
    """The report (``.md``, ``.png``) again from ``continuous_compared.json``'s S3Queue figures, with the provider's
    figures read anew from their result files."""
    result = json.loads((out / "continuous_compared.json").read_text())
    result["provider"] = provider_figures(out)
    (out / "continuous_compared.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out / "continuous_compared.md").write_text(render_md(result))
    render_png(result, out / "continuous_compared.png")
    print(f"written again: {out / 'continuous_compared.json'}, .md, .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
