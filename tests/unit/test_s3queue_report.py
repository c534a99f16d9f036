"""The side-by-side report renders from the results on record: the provider's fault cells come from its live
scenarios (bench/results/continuous_scenarios.json), not from citations."""

from __future__ import annotations

import json
from pathlib import Path

from bench.s3queue_peer import provider_figures
from bench.s3queue_report import render_md

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_the_report_takes_the_providers_fault_cells_from_its_live_scenarios() -> None:
    result = json.loads((RESULTS / "continuous_compared.json").read_text())
    result["provider"] = provider_figures(RESULTS)
    scenarios = result["provider"]["scenarios"]
    assert scenarios["ok"] and scenarios["large_file"]["times_loaded"] == 1.0
    md = render_md(result)
    rows = {line.split(" | ")[0]: line for line in md.splitlines() if line.startswith("| ")}
    late = next(v for k, v in rows.items() if k.startswith("| keys sorting before") and "ordered" in k)
    assert f"{scenarios['late_keys']['loaded_once']} of 8 late keys loaded once" in late and "cited" not in late
    bad = next(v for k, v in rows.items() if k.startswith("| a parse error"))
    assert "set aside" in bad and "not measured" not in bad
    big = next(v for k, v in rows.items() if "killed mid-file" in k)
    assert "1.0x the file [6]" in big and "continuous_scenarios.json" in md
