"""The librdkafka settings every consumer gets: the spec's consumerProperties over one set of defaults, with
the settings a bounded read needs forced. Pure: no broker."""

from __future__ import annotations

from datetime import datetime, timezone

from helpers import make_spec

from ingest_core.core.defaults import CONSUMER_GROUP_ID, ISOLATION_LEVEL
from ingest_core.core.offsets import OffsetRange, TopicPartition
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.spark.kafka_source import ReadJob, SplitConsumer, SplitPartition


def split_consumer_config(properties: dict) -> dict:
    spec = make_spec("x:1", topic="t")
    job = ReadJob(spec=spec, created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), splits=(), output_uri="file:///o")
    return SplitConsumer(properties, SplitPartition(0, "t", 0, 10, 20), job).config()


def test_consumers_read_committed_records_with_a_group_id_and_never_commit_by_default():
    for conf in (KafkaClientConfig({"bootstrap.servers": "x:1"}, ()).consumer(),
                 split_consumer_config({"bootstrap.servers": "x:1"})):
        assert conf["isolation.level"] == ISOLATION_LEVEL == "read_committed"
        assert conf["group.id"] == CONSUMER_GROUP_ID
        assert (conf["enable.auto.commit"], conf["enable.auto.offset.store"], conf["auto.offset.reset"]) \
            == (False, False, "error")


def test_the_specs_properties_win_except_what_keeps_offsets_out_of_kafka():
    props = {"bootstrap.servers": "x:1", "isolation.level": "read_uncommitted", "group.id": "mine",
             "enable.auto.commit": True, "auto.offset.reset": "earliest", "enable.auto.offset.store": True}
    for conf in (KafkaClientConfig(props, ()).consumer(), split_consumer_config(props)):
        assert (conf["isolation.level"], conf["group.id"]) == ("read_uncommitted", "mine")
        assert (conf["enable.auto.commit"], conf["auto.offset.reset"]) == (False, "error")
    assert split_consumer_config(props)["enable.auto.offset.store"] is False
    assert split_consumer_config(props)["enable.partition.eof"] is True


def test_a_read_job_crosses_to_the_executors_as_json_and_comes_back_the_same():
    """The driver's typed job is serialized once, for the split readers; secrets never ride in it."""
    spec = make_spec("x:1", topic="t")
    splits = (OffsetRange(TopicPartition("t", 0), 10, 20), OffsetRange(TopicPartition("t", 1), 0, 5))
    job = ReadJob(spec=spec, created_at=datetime(2026, 1, 1, 12, 30, 1, 250_000, tzinfo=timezone.utc), splits=splits,
                  output_uri="file:///o", poll_timeout_s=2.5, batch_records=7)
    again = ReadJob.loads(job.dumps())
    assert again == job
    assert isinstance(again.created_at, datetime) and again.splits[1].tp == TopicPartition("t", 1)


def test_a_refusal_names_the_listener_the_protocol_and_the_mechanism_and_no_secret():
    from confluent_kafka import KafkaError

    sasl = KafkaClientConfig({"bootstrap.servers": "b:9093", "security.protocol": "sasl_ssl",
                              "sasl.mechanism": "SCRAM-SHA-512", "sasl.password": "hunter2"}, ("hunter2",))
    assert sasl.refusal() is None
    for err in (KafkaError(KafkaError._TRANSPORT, "b:9093/bootstrap: Connect to ipv4#10.0.0.1:9093 failed"),
                KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
                KafkaError(KafkaError._TRANSPORT, "ssl://b:9093/1: SSL routines::unexpected eof while reading")):
        sasl.refusals.record(err)  # a broker down or gone is not a refusal: librdkafka's reconnects may help
    assert sasl.refusal() is None
    sasl.refusals.record(KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://b:9093/bootstrap: SASL authentication "
                                    "error: invalid credentials with SASL mechanism SCRAM-SHA-512 (hunter2)"))
    assert str(sasl.refusal()).startswith(
        "Kafka listener sasl_ssl://b:9093 refused the credentials (security.protocol SASL_SSL, sasl.mechanism "
        "SCRAM-SHA-512): SASL authentication error: invalid credentials with SASL mechanism SCRAM-SHA-512 "
        "([REDACTED]). Check sasl.username and sasl.password")

    mtls = KafkaClientConfig({"bootstrap.servers": "b:9094", "security.protocol": "SSL"}, ())
    mtls.refusals.record(KafkaError(KafkaError._TRANSPORT, "ssl://b:9094/1: Receive failed: error:0A000412:SSL "
                                    "routines::ssl/tls alert bad certificate: SSL alert number 42"))
    assert str(mtls.refusal()).startswith("Kafka listener ssl://b:9094 refused the TLS handshake (security.protocol "
                                          "SSL): Receive failed: error:0A000412:SSL routines::ssl/tls alert bad")
    # the first refusal stands; every client of the configuration reports to it
    assert mtls.consumer()["error_cb"] == mtls.admin()["error_cb"] == mtls.refusals.record
