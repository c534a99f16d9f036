"""OpenLineage facets of a load, from the facts the operator kept
(:class:`~airflow_provider_s3ch.core.lineage.LoadFacts`).

Needs ``apache-airflow-providers-openlineage`` (imported here only, when Airflow asks for lineage).
What the facets say, and how the datasets are named, is :mod:`airflow_provider_s3ch.core.lineage`'s:

- inputs: ``s3://{bucket}`` datasets, per file or grouped (:func:`~airflow_provider_s3ch.core.lineage.input_groups`),
  each with an ``inputStatistics`` facet (files, bytes; the rows read when there is one input);
- output: ``clickhouse://{host}:{port}`` / ``{database}.{table}`` with the table's ``schema`` (its columns
  after the load), ``outputStatistics`` (rows and bytes written, from ``system.query_log``) and a
  ``lifecycleStateChange`` when the load created the table (``CREATE``) or replaced it (``OVERWRITE``);
- the run's ``externalQuery`` facet (the query id on the server) and the job's ``sql`` facet (the
  ``INSERT`` as logged, with the credentials redacted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_s3ch.core.lineage import LoadFacts, input_groups
from airflow_provider_s3ch.core.sql_summary import shorten

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage


def _input_statistics(**figures: int | None) -> dict[str, Any]:
    """The ``inputStatistics`` facet, where this OpenLineage client has it."""
    try:
        from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet
    except ImportError:  # an older client: the datasets go without it
        return {}
    return {"inputStatistics": InputStatisticsInputDatasetFacet(**figures)}


def operator_lineage(facts: LoadFacts | None) -> OperatorLineage:
    """The lineage of a finished load; empty when nothing was loaded (a dry run, a failed try)."""
    from airflow.providers.common.compat.openlineage.facet import (
        ExternalQueryRunFacet,
        InputDataset,
        LifecycleStateChange,
        LifecycleStateChangeDatasetFacet,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
        SQLJobFacet,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage

    if facts is None:
        return OperatorLineage()
    inputs = input_groups(facts.bucket, facts.objects)
    single = len(inputs.groups) == 1
    input_datasets = [
        InputDataset(
            namespace=inputs.namespace,
            name=group.name,
            inputFacets=_input_statistics(
                rowCount=facts.read_rows if single else None, size=group.bytes, fileCount=group.files
            ),
        )
        for group in inputs.groups
    ]
    facets: dict[str, Any] = {}
    if facts.columns:
        facets["schema"] = SchemaDatasetFacet(
            fields=[SchemaDatasetFacetFields(name=c.name, type=c.type) for c in facts.columns]
        )
    if facts.created:
        facets["lifecycleStateChange"] = LifecycleStateChangeDatasetFacet(
            lifecycleStateChange=LifecycleStateChange.CREATE
        )
    elif facts.mode == "overwrite":
        facets["lifecycleStateChange"] = LifecycleStateChangeDatasetFacet(
            lifecycleStateChange=LifecycleStateChange.OVERWRITE
        )
    output = OutputDataset(
        namespace=facts.namespace,
        name=facts.name,
        facets=facets,
        outputFacets={
            "outputStatistics": OutputStatisticsOutputDatasetFacet(
                rowCount=facts.written_rows, size=facts.written_bytes
            )
        },
    )
    return OperatorLineage(
        inputs=input_datasets,
        outputs=[output],
        run_facets={"externalQuery": ExternalQueryRunFacet(externalQueryId=facts.query_id, source=facts.namespace)},
        job_facets={"sql": SQLJobFacet(query=shorten(facts.sql))} if facts.sql else {},
    )
