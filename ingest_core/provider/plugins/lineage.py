"""A run's lineage for Airflow's OpenLineage provider: an extractor of the publish task, named in
`[openlineage] extractors` (docs/lineage.md). Each published run names:

- its inputs: the Kafka topics it read, as OpenLineage's Kafka naming writes them (`kafka://host:port`, the topic),
  with the records it read (the offsets of its published task groups: an estimate, as `PublishedFigures` says);
- its outputs: the datasource, as the files of its deep-storage folder (OpenLineage's S3 or file naming), with the
  rows and bytes it published and the schema of its segments; and, where configured, its Iceberg table by the
  table's location.

`run_lineage` is pure; `IngestPublishExtractor` reads the metadata store. For every other task it finds nothing,
so the provider falls back to what it does without this extractor (hook lineage, inlets and outlets). It loads the
store and the supervisor's reading as it loads: only a deployment that names it in `[openlineage] extractors` does.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from airflow.providers.openlineage.extractors.base import BaseExtractor, OperatorLineage
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    input_statistics_input_dataset,
    output_statistics_output_dataset,
    schema_dataset,
)

from ingest_core.core.spec import COMPACTION_DAG_SUFFIX
from ingest_core.handover import deep_storage
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.store.iceberg import table_location
from ingest_core.store.segment_schema import merged_types
from ingest_core.supervisor.planning import spec_for
from ingest_core.supervisor.run import open_store

PUBLISH_TASK = "publish"
DECORATED = "_PythonDecoratedOperator"  # what `@task` makes: the publish task's operator class


def kafka_namespace(bootstrap_servers: str) -> str:
    """OpenLineage's Kafka namespace: the first bootstrap server, `kafka://host:port`."""
    first = bootstrap_servers.split(",")[0].strip()
    first = first.split("://", 1)[-1]  # a listener name (SASL_SSL://host:port) is no part of it
    return f"kafka://{first}"


def storage_dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage's naming of a folder: `s3://bucket` and the key; `file` and the path; else scheme://host, path."""
    parts = urlsplit(uri)
    if parts.scheme in ("s3", "s3a"):
        return f"s3://{parts.netloc}", parts.path.lstrip("/")
    if parts.scheme in ("", "file"):
        return "file", parts.path
    return f"{parts.scheme}://{parts.netloc}", parts.path


def run_lineage(*, topics: Sequence[str], bootstrap_servers: str, records: int, datasource_uri: str,
                rows: int, size: int, columns: Mapping[str, str], iceberg_location: str | None) -> OperatorLineage:
    """The lineage of one published run: topics in, the datasource (and its Iceberg table) out."""
    namespace = kafka_namespace(bootstrap_servers)
    stats_in = {"inputStatistics": input_statistics_input_dataset.InputStatisticsInputDatasetFacet(rowCount=records)}
    inputs = [InputDataset(namespace=namespace, name=t, inputFacets=stats_in if len(topics) == 1 else {})
              for t in topics]
    schema = schema_dataset.SchemaDatasetFacet(fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t)
                                                       for n, t in columns.items()])
    stats_out = {"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
        rowCount=rows, size=size)}
    outputs = [OutputDataset(*storage_dataset_name(datasource_uri), facets={"schema": schema},
                             outputFacets=stats_out)]
    if iceberg_location is not None:
        outputs.append(OutputDataset(*storage_dataset_name(iceberg_location), facets={"schema": schema}))
    return OperatorLineage(inputs=inputs, outputs=outputs)


class IngestPublishExtractor(BaseExtractor):
    """The publish task of a datasource's DAG (an `@task` function): its run's lineage once it published."""

    @classmethod
    def get_operator_classnames(cls) -> list[str]:
        return [DECORATED]

    def _execute_extraction(self) -> OperatorLineage | None:
        return None  # known only once the run published

    def extract_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        op = self.operator
        if op.task_id != PUBLISH_TASK or op.dag_id.endswith(COMPACTION_DAG_SUFFIX):
            return None
        return published_lineage(op.dag_id, task_instance.run_id)


def published_lineage(datasource: str, run_id: str) -> OperatorLineage | None:
    """Read from the metadata store: the run, its spec, its segments' schema. None when it published nothing."""
    store = open_store()
    run = store.runs.get(datasource, run_id)
    spec = spec_for(store, datasource, {})
    if run is None or run.published is None or spec is None:
        return None
    topics = sorted({p.tp.topic for g in run.plan.groups for p in g.partitions}) or \
        [spec.io_config.topic or spec.io_config.topic_pattern]
    bootstrap = KafkaClientConfig.from_properties(spec.io_config.consumer_properties).bootstrap_servers
    segments = store.segment_records.of(datasource, used_only=False, run_id=run_id)
    return run_lineage(topics=topics, bootstrap_servers=bootstrap, records=run.published.records,
                       datasource_uri=deep_storage.datasource_uri(spec), rows=run.published.rows,
                       size=run.published.bytes, columns=merged_types(segments) if segments else {},
                       iceberg_location=table_location(spec) if spec.microbatch.iceberg_on else None)
