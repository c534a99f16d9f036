"""What the README says is what the code does: its first example parses as written on the installed Airflow (CI
runs the suite on the oldest and the newest supported), and the figures it quotes are the code's."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_provider_s3ch.core.ledger import DEFAULT_CLAIM_TIMEOUT
from airflow_provider_s3ch.core.plan.settings import LATENT_REQUEST_MS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_the_first_example_builds_its_dag_as_written() -> None:
    code = re.search(r"```python\n(.*?)```", README, re.DOTALL).group(1)
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)
    op = scope["load"]
    assert op.dag.dag_id == "posts_monthly" and [t.task_id for t in op.dag.tasks] == ["load_posts"]
    assert op.table == "analytics.posts" and op.s3_uri.startswith("s3://my-bucket/posts/by_month/")


def test_the_figures_the_readme_quotes_are_the_codes() -> None:
    assert f"took ≥ {LATENT_REQUEST_MS:g} ms" in README
    assert f"`claim_timeout` | `{DEFAULT_CLAIM_TIMEOUT}`" in README
