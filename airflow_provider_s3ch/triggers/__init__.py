"""Triggers of the provider: what a deferred sensor waits on in Airflow's triggerer."""

from __future__ import annotations
