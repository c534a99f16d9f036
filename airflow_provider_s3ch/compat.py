"""The one place that knows where Airflow keeps its base classes (Airflow 3 first, 2.x fallback)."""

from __future__ import annotations

try:  # Airflow 3
    from airflow.sdk import BaseHook, BaseOperator, Context
except ImportError:  # pragma: no cover - Airflow 2.x
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef]
    from airflow.models import BaseOperator  # type: ignore[no-redef]
    from airflow.utils.context import Context  # type: ignore[no-redef]

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # pragma: no cover - Airflow 2.x
    from airflow.utils.log.secrets_masker import mask_secret  # type: ignore[no-redef]

__all__ = ["BaseHook", "BaseOperator", "Context", "mask_secret"]
