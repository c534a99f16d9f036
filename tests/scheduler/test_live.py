"""``s3ch-local live`` briefly, through Airflow's own api-server, dag-processor, scheduler and triggerer on the
continuous example DAG: every file put reaches the table once, and the summary names the figures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import main
from airflow_provider_s3ch.local.live import LiveOptions, run_live

ROOT = Path(__file__).resolve().parents[2]
TABLE = "default.live_events"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as s:
        yield s


def test_live_puts_files_and_each_reaches_the_table_once(stack: LocalStack, tmp_path: Path) -> None:
    lines: list[str] = []
    options = LiveOptions(dag_file=ROOT / "example_dags" / "example_continuous.py", table=TABLE, seconds=15,
                          rows_per_file=50, report_every=3)  # fmt: skip
    result = run_live(stack, options, home=tmp_path, say=lines.append)
    out = "\n".join(lines)
    print(out)

    assert result.put == 15
    # What the table holds, read here, not taken from the command: each file's 50 rows once, no other rows.
    per_file = stack.clickhouse_client().execute(f"SELECT file, count(), uniqExact(id) FROM {TABLE} GROUP BY file "
                                                 "ORDER BY file")  # fmt: skip
    assert per_file == [(n, 50, 50) for n in range(1, 16)]
    assert result.exactly_once and result.loaded == 15 and len(result.latencies) == 15
    assert result.runs and all(kind.endswith("/success") for kind in result.runs), result.runs
    assert result.inserts >= 1
    # The progress lines and the summary, with their figures.
    assert "files put   15  loaded   15  lag   0.0 s" in out
    assert "files put: 15, loaded: 15, rows: 750 (50 per file); each file exactly once: yes" in out
    assert f"p50 {result.percentile(50):.1f} s, p95 {result.percentile(95):.1f} s" in out
    assert f"inserts from S3: {result.inserts}" in out
    # The ledger: one loaded row per file.
    ledger = stack.clickhouse_client().execute(
        "SELECT countIf(state = 'loaded'), uniqExact(key) FROM default._s3ch_ledger FINAL WHERE table = %(t)s",
        {"t": TABLE})  # fmt: skip
    assert ledger == [(15, 15)]


def test_the_command_refuses_a_missing_dag_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["live", "--dag-file", str(tmp_path / "nothing.py")]) == 2
    assert "no DAG file at" in capsys.readouterr().err
