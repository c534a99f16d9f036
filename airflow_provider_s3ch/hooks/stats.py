"""Airflow's metrics: a run's freshness figures as ``s3ch.*`` gauges and timings (docs/lag.md).

They go wherever the deployment sends Airflow's own metrics (StatsD, OpenTelemetry; ``[metrics]``), tagged with
the task's ``dag_id`` and ``task_id`` (tags reach backends that take them: OpenTelemetry, StatsD with Datadog's
or InfluxDB's tag format). A metric that cannot be sent is logged and the load stands.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from airflow_provider_s3ch.compat import Stats, get_current_context
from airflow_provider_s3ch.core.freshness import Freshness

#: The prefix of every metric the provider emits.
PREFIX = "s3ch"


def task_tags() -> dict[str, str]:
    """``dag_id`` and ``task_id`` of the task that runs now; none outside a task."""
    try:
        ti = get_current_context()["ti"]
    except Exception:  # noqa: BLE001 - outside a task (a test, a script): untagged
        return {}
    return {"dag_id": str(ti.dag_id), "task_id": str(ti.task_id)}


def gauges(f: Freshness) -> dict[str, float]:
    """The gauges of the figures, by name: seconds, files, bytes, events."""
    out: dict[str, float] = {
        f"{PREFIX}.lag": f.lag_s, f"{PREFIX}.lag_left": f.lag_left_s, f"{PREFIX}.pending_files": f.pending_files,
        f"{PREFIX}.pending_bytes": f.pending_bytes, f"{PREFIX}.pending_held": f.pending_held,
        f"{PREFIX}.pending_changed": f.pending_changed, f"{PREFIX}.pending_later": f.pending_later,
        f"{PREFIX}.loaded_files": f.loaded_files,
    }
    if f.queue_depth is not None:
        out.update({f"{PREFIX}.queue.events": f.queue_depth.events, f"{PREFIX}.queue.files": f.queue_depth.files,
                    f"{PREFIX}.queue.pending": f.queue_depth.pending})
    return out


def timings(f: Freshness) -> dict[str, timedelta]:
    """The timings of the figures, by name: the latency from landing to rows visible (none when nothing loaded)."""
    if f.latency is None:
        return {}
    lat = f.latency
    return {f"{PREFIX}.latency.{name}": timedelta(seconds=value)
            for name, value in (("p50", lat.p50_s), ("p95", lat.p95_s), ("max", lat.max_s))}


def emit(f: Freshness, log: logging.Logger) -> None:
    """Send the figures to Airflow's metrics, tagged with the task."""
    tags = task_tags()
    try:
        for name, value in gauges(f).items():
            Stats.gauge(name, value, tags=tags)
        for name, dt in timings(f).items():
            Stats.timing(name, dt, tags=tags)
    except Exception as exc:  # noqa: BLE001 - metrics are best effort; the load stands
        log.warning("Could not send the freshness metrics: %s", exc)
