"""The benchmark harness still runs end to end (tiny datasets) and reports every ratio.

Figures are not asserted: speed is the benchmark's business, not the tests'.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_bench_reports_every_variant_and_ratio(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--skip-overhead", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["datasets"], "no dataset measured"
    for dataset in results["datasets"]:
        assert set(dataset["variants"]) == {"a", "b", "c", "d", "e"}
        for ratio in ("c_over_a", "c_over_d", "e_over_c"):
            assert dataset["ratios"][ratio] > 0, ratio
    for cap in results["memory_caps"]:
        assert cap["peak_within_cap"], cap
    assert [c["chunks"] for c in results["chunks"]] == [1, 10, 20], results["chunks"]  # 20 files: 40 chunks of 1 is 20
    assert len({c["rows"] for c in results["chunks"]}) == 1
    latency = results["latency"]
    assert latency["proxy_requests"] > 0 and latency["proxy_bytes"] > 0  # the inserts read through the proxy
    (shaped,) = latency["datasets"]
    # defaults, the plan and 6 grid points (insert threads 1, 2, 4 x reading streams 2, 8) on each path
    assert len(shaped["median_s"]) == 16 and len(shaped["proxy_over_direct"]) == 8, shaped  # every variant loaded
    assert set(shaped["plan_vs_best"]) == {"direct", "proxy"} and len(shaped["loads"]) == 16
    e2e, *e2e_proxies = results["end_to_end"]  # direct, then each of the proxy's distances
    assert [r["path"] for r in e2e_proxies] == ["20 ms, 100 MB/s", "50 ms, 50 MB/s"]
    assert all(r["rows_equal"] for r in e2e_proxies)
    assert e2e["rows_equal"] and e2e["speedup_end_to_end"] > 0 and e2e["median"]["operator"]["around_s"] > 0
    assert all(r["peak"] > 0 and r["predicted"] > 0 for r in e2e["runs"]["operator"])  # the XCom's prediction
    assert e2e["median"]["worker"]["task_s"] > 0  # the worker-side peer ran, rows equal above
    assert e2e["median"]["floor"]["around_s"] > 0 and "| floor around s |" in (tmp_path / "REPORT.md").read_text()
    history = results["history"]
    assert [r["history"] is None for r in history["uncapped"]["runs"]] == [True, False]  # the second run learned
    report = (tmp_path / "REPORT.md").read_text()
    assert "(c)/(a)" in report and "moto" in report and "## Chunks" in report and "## End to end" in report
    assert "## Through a proxy that models S3" in report and "## Peak memory: predicted against measured" in report
    assert "## Learning from past loads" in report and "## The guide's regime on paper" in report
    assert list(tmp_path.glob("*.png"))
