"""A published run's lineage (`provider.plugins.lineage.run_lineage`, pure): OpenLineage's Kafka and storage naming,
its Iceberg table when configured, and the figures on the datasets they belong to."""

from __future__ import annotations

from openlineage.client.naming.dataset import S3, Kafka, LocalFileSystem

from ingest_core.provider.plugins.lineage import kafka_namespace, run_lineage, storage_dataset_name


def test_kafka_naming_is_openlineages_whatever_the_bootstrap_list_looks_like():
    want = Kafka(bootstrap_server_host="b1.example", port="9093", topic="wiki")
    for servers in ("b1.example:9093", "b1.example:9093,b2.example:9093", " SASL_SSL://b1.example:9093 ,b2:1"):
        assert kafka_namespace(servers) == want.get_namespace()


def test_storage_naming_is_openlineages():
    s3 = S3(bucket_name="lake", object_key="ingest/wikipedia")
    assert storage_dataset_name("s3://lake/ingest/wikipedia") == (s3.get_namespace(), s3.get_name())
    local = LocalFileSystem(path="/data/deep/wikipedia")
    assert storage_dataset_name("file:///data/deep/wikipedia") == (local.get_namespace(), local.get_name())


def test_a_runs_lineage_with_and_without_its_iceberg_table():
    args = dict(topics=["wiki"], bootstrap_servers="k:9092", records=120, datasource_uri="s3://lake/ds/wikipedia",
                rows=80, size=4096, columns={"__time": "LONG", "channel": "STRING", "edits": "LONG"})
    plain = run_lineage(**args, iceberg_location=None)
    (source,) = plain.inputs
    assert (source.namespace, source.name, source.inputFacets["inputStatistics"].rowCount) == ("kafka://k:9092",
                                                                                               "wiki", 120)
    (out,) = plain.outputs
    assert (out.namespace, out.name) == ("s3://lake", "ds/wikipedia")
    assert (out.outputFacets["outputStatistics"].rowCount, out.outputFacets["outputStatistics"].size) == (80, 4096)
    assert [f.name for f in out.facets["schema"].fields] == ["__time", "channel", "edits"]
    with_table = run_lineage(**args, iceberg_location="s3://lake/ds/wikipedia/.iceberg/wikipedia")
    assert [(o.namespace, o.name) for o in with_table.outputs] == [
        ("s3://lake", "ds/wikipedia"), ("s3://lake", "ds/wikipedia/.iceberg/wikipedia")]
    # a topicPattern's run reads several topics: the records are not split among them (no per-topic figure)
    several = run_lineage(**{**args, "topics": ["a", "b"]}, iceberg_location=None)
    assert [(i.name, i.inputFacets) for i in several.inputs] == [("a", {}), ("b", {})]
