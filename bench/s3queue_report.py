"""The report of :mod:`bench.s3queue_peer`: the markdown table (S3Queue beside the provider) and the latency plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _s(v: Any, unit: str = " s") -> str:
    return "-" if v is None else f"{v:g}{unit}" if isinstance(v, float | int) else str(v)


def _files(v: list[int]) -> str:
    return "none" if not v else ", ".join(map(str, v[:12])) + (f" (+{len(v) - 12})" if len(v) > 12 else "")


def _latency_rows(r: dict[str, Any], prov: dict[str, Any]) -> list[str]:
    rows = []
    pl = {m["mode"]: m for m in prov.get("latency", {}).get("modes", [])}
    sqs, listing = pl.get("sqs", {}), pl.get("listing", {})
    pcell = (f"SQS: p50 {_s(sqs.get('p50_s'))}, p95 {_s(sqs.get('p95_s'))}, max {_s(sqs.get('max_s'))} "
             f"({sqs.get('files_put')} files); listing 10 s: p50 {_s(listing.get('p50_s'))}, "
             f"p95 {_s(listing.get('p95_s'))}, max {_s(listing.get('max_s'))} [1]") if pl else "-"  # fmt: skip
    for m in r.get("latency", []):
        cell = (f"p50 {_s(m['p50_s'])}, p95 {_s(m['p95_s'])}, max {_s(m['max_s'])}; {m['loaded']}/{m['files']} "
                f"files, {'each once' if m['exactly_once'] else 'NOT each once'}")  # fmt: skip
        rows.append(f"| latency, a file a {m['interval_s']:g} s: {m['mode']}, polling {m['polling']} | {cell} "
                    f"| {pcell} |")  # fmt: skip
    idle = ((prov.get("scenarios") or {}).get("idle") or {}).get("latency_s") or {}
    for gap in sorted({g["idle_s"] for g in r.get("idle", [])}):
        cells = [f"{g['polling']} {_s(g['latency_s'])}" for g in r["idle"] if g["idle_s"] == gap]
        mine = idle.get(str(float(gap)))
        pcell = f"SQS + listing, through the live stream: {_s(mine)} [6]" if mine is not None else "not measured"
        rows.append(f"| latency after {gap:g} s idle (unordered) | {'; '.join(cells)} | {pcell} |")
    if memory := (prov.get("scenarios") or {}).get("memory_mib"):
        cells = ", ".join(f"{name} {m['peak_mib']:,.0f}" for name, m in sorted(memory.items()))
        rows.append(f"| memory (RSS, MiB) while loading | node with a queue: in the cost rows below | peak over the "
                    f"live run, each process tree: {cells} [6] |")
    return rows


def _fault_rows(r: dict[str, Any], prov: dict[str, Any]) -> list[str]:
    f = r.get("faults")
    if not f:
        return []
    pk = prov.get("kills")
    pcell = (f"{pk['kills']} SIGKILLs (triggerer, scheduler, task, ClickHouse) over {pk['files_put']} files: "
             f"{'each once' if pk['exactly_once'] else 'NOT each once'}, {pk['missing']} missing, "
             f"{pk['doubled']} doubled [2]") if pk else "-"  # fmt: skip
    sc = prov.get("scenarios") or {}
    big, late, reup, bad = (sc.get(k) for k in ("large_file", "late_keys", "reupload", "parse_error"))
    big_cell = (f"{big['rows']:,} rows, the node SIGKILLed with {big['killed']['insert_read_rows_at_kill']:,} read by "
                f"the insert and {big['killed']['rows_in_target_at_kill']:,} in the target (staged); after the "
                f"restart and the task's retry: {big['times_loaded']}x the file [6]") if big and big.get(
                    "killed") and "missed" not in big["killed"] else "not measured"  # fmt: skip
    late_cell = (f"{late['loaded_once']} of {late['keys']} late keys loaded once, through the live stream [6]"
                 if late else "loaded: the ledger decides, not a watermark (cited, [5])")
    reup_cell = (f"left out as a changed file (`on_changed='skip'`, the events' default): new rows {reup['new_rows']}, "
                 f"the loaded version's {reup['old_rows']} kept; named in the run's XCom (`skipped_changed_keys`): "
                 f"{reup['told_in_xcom']} [6]" if reup
                 else "the ledger keys on key and ETag: new bytes are a new file (cited, [5])")  # fmt: skip
    bad_cell = (f"set aside (`on_bad_file='set_aside'`): {'recorded' if bad['set_aside'] else 'NOT recorded'} in "
                f"`_s3ch_ledger_set_aside` with the server's error, {bad['rows_in_table']} of its rows in the table, "
                f"the other files each once: {bad['others_once']}; named in the run's XCom (`set_aside_files`): "
                f"{bad['told_in_xcom']} [6]" if bad else "not measured here")  # fmt: skip
    rows = []
    for k in f["kills"]:
        stuck = k["engine"].get("keeper_nodes", {}).get("processing")
        rows.append(f"| node SIGKILLed {k['kills']} times, {k['files']} files ({k['rows_per_file']} rows): "
                    f"{k['mode']} | {k['once']}/{k['files']} once; lost {_files(k['lost'])}; duplicated "
                    f"{_files(k['duplicated'])} (after {k['drain_s']:g} s; processing nodes left in Keeper: "
                    f"{_s(stuck, '')}) | {pcell} |")  # fmt: skip
    for b in f["large_file"]:
        at = b["killed"]["rows_in_target_at_kill"] if b["killed"] else "not killed (loaded first)"
        rows.append(f"| one file of {b['rows']:,} rows ({b['bytes'] / 1e6:.0f} MB) killed mid-file: {b['mode']} | "
                    f"rows in target at the kill: {at}; after restart: {b['times_loaded']}x the file "
                    f"({b['outcome']}) | {big_cell} |")  # fmt: skip
    for o in f["out_of_order"]:
        rows.append(f"| keys sorting before processed ones ({len(o['late_keys'])} late): {o['mode']} | skipped: "
                    f"{_files(o['skipped'])} | {late_cell} |")  # fmt: skip
    for u in f["reupload"]:
        rows.append(
            f"| re-upload of a loaded key with new bytes: {u['mode']} | {u['verdict']} (new rows "
            f"{u['new_rows']}) | {reup_cell} |"
        )
    for e in f["parse_error"]:
        failed = [x["file"].rsplit("/", 1)[-1] for x in e["engine"].get("failed", [])]
        rows.append(f"| a parse error in 1 of 6 files: {e['mode']} | failed: {', '.join(failed) or 'none'} "
                    f"after {_s(e['failed_after_s'])}; others: lost {_files(e['lost'])}, duplicated "
                    f"{_files(e['duplicated'])}; told in system.s3queue_metadata_cache / s3_queue_metadata "
                    f"(failed_nodes) / s3queue_log | {bad_cell} |")  # fmt: skip
    return rows


def _load_rows(r: dict[str, Any], prov: dict[str, Any]) -> list[str]:
    rows = []
    t = r.get("throughput")
    if t:
        pb = prov.get("batching")
        pcell = (
            (
                f"{pb['files']:,} files of {pb['file_bytes']:,} B: last rows {pb['drain_after_last_put_s']} s "
                f"after the last put, {pb['runs_total']} DAG runs, {pb['inserts']} inserts [3]"
            )
            if pb
            else "-"
        )
        for s in t["small"]:
            rows.append(f"| throughput, {s['files']:,} small files of {s['file_bytes']:,} B: {s['mode']} | "
                        f"{s['load_s']} s: {s['rows_per_s']:,} rows/s, {s['files_per_s']} files/s; "
                        f"{s['parts_made']} parts, {s['commits']} commits | {pcell} |")  # fmt: skip
        lg = t["large"]
        rows.append(f"| throughput, {lg['files']} files, {lg['bytes'] / 1e6:,.0f} MB CSV: unordered | "
                    f"{lg['load_s']} s: {lg['mb_per_s']} MB/s, {lg['rows_per_s']:,} rows/s; {lg['parts_made']} "
                    f"parts | not run on these files |")  # fmt: skip
    if tp := prov.get("throughput"):  # both sides on the same files, in one run [7]
        sp = tp["small"]["provider"]
        for s in tp["small"]["s3queue"]:
            rows.append(f"| throughput, {s['files']:,} files of {s['file_bytes']:,} B, the same files for both (one "
                        f"run [7]): {s['mode']} | {s['load_s']} s: {s['rows_per_s']:,} rows/s; {s['parts_made']} "
                        f"parts, {s['commits']} commits; each once: {s['exactly_once']} | one ledger load "
                        f"(`max_files_per_load=1000`): {sp['load_s']} s: {sp['rows_per_s']:,} rows/s; {sp['inserts']} "
                        f"inserts, {sp['parts_made']} parts; each once: {sp['exactly_once']} |")  # fmt: skip
        lq, lp = tp["large"]["s3queue"], tp["large"]["provider"]
        rows.append(f"| throughput, {lq['files']} files, {lq['bytes'] / 1e6:,.0f} MB CSV, the same files for both (one "
                    f"run [7]): unordered | {lq['load_s']} s: {lq['mb_per_s']} MB/s, {lq['rows_per_s']:,} rows/s; "
                    f"{lq['parts_made']} parts | one ledger load: {lp['load_s']} s: {lp['mb_per_s']} MB/s, "
                    f"{lp['rows_per_s']:,} rows/s; {lp['parts_made']} parts; each once: {lp['exactly_once']} |")
    c = r.get("cost")
    if c:
        pc = prov.get("cost")
        pcell = "; ".join(f"{x['mode']} poll {x['poll_interval_s']:g} s: {x['list_requests_per_hour']:,} LIST/h"
                          for x in pc["per_hour"]) + f" ({pc['objects']:,} objects) [4]; SQS mode: no listing" \
            if pc else "-"  # fmt: skip
        for x in c["runs"]:
            req = ", ".join(f"{k} {v:,}" for k, v in sorted(x["requests_per_hour"].items()))
            rows.append(f"| S3 requests an hour, {c['objects_under_prefix']:,} objects under the prefix, a file "
                        f"every {c['file_every_s']:g} s: polling {x['polling']} | {x['total_per_hour']:,} ({req}); "
                        f"node RSS {x['rss_mib_idle_with_queue']} MiB with the queue | {pcell} |")  # fmt: skip
    return rows


def render_md(result: dict[str, Any]) -> str:
    r, prov = result["s3queue"], result["provider"]
    lines = [
        "# S3Queue beside the provider's continuous ingestion, measured",
        "",
        f"`{result['command']}` on {result['started']} ({result['machine']}), ClickHouse {r.get('clickhouse')} "
        f"on `LocalStack(keeper=True)`: one node, moto's S3, Debian's ZooKeeper. Sizes run: "
        f"`{result['sizes']}`{' (quick run)' if result['quick'] else ''}. {result['note']}",
        "",
        "S3Queue's column is measured by this command. The provider's column is read from the provider's own "
        'result files (sources below), measured on the same stack with Airflow; a cell says "cited" where it '
        'states a design property from the documentation, "not measured" where nothing was run.',
        "",
        "| scenario | S3Queue (measured here) | provider |",
        "| --- | --- | --- |",
        *_latency_rows(r, prov),
        *_fault_rows(r, prov),
        *_load_rows(r, prov),
        "",
        "Sources of the provider's column: "
        + "; ".join(
            f"[{i}] {prov[k]['source']}" for i, k in enumerate(("latency", "kills", "batching", "cost"), 1) if k in prov
        )
        + "; [5] docs/ledger.md"
        + ("; [6] " + prov["scenarios"]["source"] if "scenarios" in prov else "")
        + ("; [7] " + prov["throughput"]["source"] if "throughput" in prov else "") + ".",  # fmt: skip
        "",
    ]
    return "\n".join(lines)


def render_png(result: dict[str, Any], path: Path) -> None:
    """Box plots of the put -> readable latencies: each S3Queue setting and the provider's modes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    data, labels = [], []
    for m in result["s3queue"].get("latency", []):
        if m["latencies_s"]:
            data.append(m["latencies_s"])
            labels.append(f"S3Queue\n{m['mode']}\n{m['polling']}")
    for m in result["provider"].get("latency", {}).get("modes", []):
        if m.get("latencies_s"):
            data.append(m["latencies_s"])
            labels.append(f"provider\n{m['mode']}")
    if not data:
        return
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.boxplot(data, whis=(5, 95), showfliers=True)
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("put -> readable, s (log)")
    ax.set_title("Continuous ingestion latency, one file a second (whiskers p5-p95)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
