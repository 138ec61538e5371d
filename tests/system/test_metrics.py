"""Druid's ingestion metrics through Airflow's own `[metrics]`, from real DAG runs (`airflow dags test`, the plugin's
listener): a StatsD listener (a UDP socket here) with InfluxDB-style tags, then an OTLP/HTTP receiver (an HTTP
server here decoding OpenTelemetry's protobuf) with `otel_on`. Each value must equal what `ingest status --json`
says right after the run. The second run also has OpenLineage's provider on, with its file transport: its publish
task's event names the topic and the datasource."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_dag import AirflowHome, dags_folder, ingest, produce_events, write_example_variant

from ingest_core.core.periods import parse_datetime

pytestmark = [pytest.mark.kafka]

DATASOURCE = "metered"
PER_RUN = 100  # maxRecordsPerRun: each run leaves records behind, so the lag is no 0
BAD = 3  # records that are not JSON: unparseable


class StatsdListener:
    """A StatsD server: every datagram received on a UDP socket, as lines."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)  # the reader's deadline per receive, so it can stop
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except socket.timeout:
                continue
            self.lines += data.decode().splitlines()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sock.close()


def parse_influx(line: str) -> tuple[str, dict[str, str], float, str]:
    """`airflow.ingest/kafka/lag,dataSource=x,stream=t:5|g` -> (name, tags, value, type)."""
    head, _, rest = line.partition(":")
    value, _, kind = rest.partition("|")
    name, *pairs = head.split(",")
    return name, dict(p.split("=", 1) for p in pairs), float(value), kind.split("|")[0]


class OtlpReceiver:
    """An OTLP/HTTP metrics receiver: each export request decoded with OpenTelemetry's protobuf classes."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
            ExportMetricsServiceResponse,
        )

        self.requests: list = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                answer = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/metrics"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def points(self) -> list[tuple[str, dict[str, str], float]]:
        """(name, attributes, value) of every data point received; a histogram's value is its sum."""
        out = []
        for request in self.requests:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        for p in getattr(metric, kind).data_points:
                            attrs = {a.key: a.value.string_value for a in p.attributes}
                            if kind in ("histogram", "exponential_histogram"):
                                value = p.sum
                            else:
                                value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                            out.append((metric.name, attrs, float(value)))
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def expected(status: dict, run_id: str) -> dict[tuple[str, tuple], float]:
    """Druid's metrics as `ingest status --json` gives their figures: {(name, sorted tags): value}."""
    p = status["payload"]
    ds, stream = p["dataSource"], p["stream"]
    lags = p["minimumLag"]
    out = {("ingest/kafka/partitionLag", (("dataSource", ds), ("partition", k), ("stream", stream))): float(v)
           for k, v in lags.items()}
    base = (("dataSource", ds), ("stream", stream))
    out[("ingest/kafka/lag", base)] = float(p["aggregateLag"])
    out[("ingest/kafka/maxLag", base)] = float(max(lags.values()))
    out[("ingest/kafka/avgLag", base)] = p["aggregateLag"] / len(lags)
    (run,) = [r for r in p["recentRuns"] if r["runId"] == run_id]
    tags = tuple(sorted({"dataSource": ds, "taskStatus": run["status"]}.items()))
    for key in ("processed", "processedBytes", "processedWithError", "unparseable", "thrownAway"):
        out[(f"ingest/events/{key}", tags)] = float(run["rowStats"].get(key, 0))
    out[("ingest/rows/output", tags)] = float(run["published"]["rows"])
    out[("ingest/segments/count", tags)] = float(run["published"]["segments"])
    took = parse_datetime(run["publishedAt"]) - parse_datetime(run["createdAt"])
    out[("task/run/time", tags)] = float(took // timedelta(milliseconds=1))
    return out


def check_publish_age(received: dict, status: dict, before: datetime, after: datetime) -> None:
    """The age of the last publish, sent between `before` and `after`: publishedAt + age lies in that window."""
    (age,) = [v for (name, _), v in received.items() if name == "ingest/publish/age"]
    published = max(parse_datetime(r["publishedAt"]) for r in status["payload"]["recentRuns"] if r["publishedAt"])
    assert 0 <= age <= (after - published).total_seconds() * 1000
    assert published.timestamp() * 1000 + age >= before.timestamp() * 1000 - 1


def run_id_of(status: dict) -> str:
    return max(status["payload"]["recentRuns"], key=lambda r: r["createdAt"])["runId"]


def now() -> datetime:
    from ingest_core.store.schema import utcnow

    return utcnow()


@pytest.mark.timeout(900)
def test_druids_metrics_reach_statsd_and_opentelemetry_with_the_values_ingest_status_reports(tmp_path, broker,
                                                                                             spark_connect):
    folder = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=2)
    write_example_variant(folder, DATASOURCE, topic, {"maxRecordsPerRun": PER_RUN}, taskCount=1)
    home = AirflowHome(tmp_path, folder, broker.bootstrap, f"sqlite:///{tmp_path / 'ingest.db'}", spark_connect.url)
    broker.produce(topic, [f"not json {i}".encode() for i in range(BAD)], partition=0)  # first: run 1 reads them
    produce_events(broker.bootstrap, topic, 130, seed=11)

    # run 1: StatsD with InfluxDB-style tags (statsd_exporter reads them as labels)
    statsd = StatsdListener()
    try:
        before = now()
        home.airflow("dags", "test", DATASOURCE, "2026-01-01T00:00:00+00:00", env={
            **home.env, "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"})
        after = now()
    finally:
        statsd.close()
    status = json.loads(ingest(home, "status", DATASOURCE, "--json").stdout)
    received, kinds = {}, {}
    for line in statsd.lines:
        name, tags, value, kind = parse_influx(line)
        if name.startswith(("airflow.ingest/", "airflow.task/run")):
            key = (name.removeprefix("airflow."), tuple(sorted(tags.items())))
            received[key] = value + (received.get(key, 0) if kind == "c" else 0)
            kinds[key[0]] = kind
    want = expected(status, run_id_of(status))
    assert {k: received.get(k) for k in want} == want
    assert status["payload"]["aggregateLag"] == 130 + BAD - PER_RUN  # no 0: the lag was really compared
    assert want[("ingest/events/unparseable", next(t for n, t in want if n == "ingest/events/unparseable"))] > 0
    assert kinds["ingest/kafka/lag"] == "g" and kinds["ingest/events/processed"] == "c"
    assert kinds["task/run/time"] == "ms"
    check_publish_age(received, status, before, after)

    # run 2: OpenTelemetry over OTLP/HTTP; it reads on from run 1's committed offsets
    produce_events(broker.bootstrap, topic, PER_RUN, seed=12)
    receiver, lineage_file = OtlpReceiver(), tmp_path / "openlineage.jsonl"
    try:
        before = now()
        home.airflow("dags", "test", DATASOURCE, "2026-01-02T00:00:00+00:00", env={
            **home.env, "AIRFLOW__METRICS__OTEL_ON": "True", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.url,
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf", "OTEL_METRIC_EXPORT_TIMEOUT": "10000",
            # and OpenLineage's provider, with its file transport and the publish task's extractor
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage_file),
                                                           "append": True}),
            "AIRFLOW__OPENLINEAGE__EXTRACTORS": "ingest_core.provider.plugins.lineage.IngestPublishExtractor"})
        after = now()
    finally:
        receiver.close()
    status = json.loads(ingest(home, "status", DATASOURCE, "--json").stdout)
    received = {}
    for name, attrs, value in receiver.points():  # later exports repeat a point: the last one stands
        if name.startswith(("airflow.ingest/", "airflow.task/run")):
            received[(name.removeprefix("airflow."), tuple(sorted(attrs.items())))] = value
    # OpenTelemetry's names are case-insensitive: its SDK exports them lowercased (airflow.ingest/kafka/maxlag)
    want = {(name.lower(), tags): v for (name, tags), v in expected(status, run_id_of(status)).items()}
    assert {k: received.get(k) for k in want} == want
    assert status["payload"]["aggregateLag"] == 130 + BAD - PER_RUN
    check_publish_age(received, status, before, after)
    check_lineage(lineage_file, status, topic, broker.bootstrap, Path(home.env["INGEST_DEEP_STORAGE"][7:]))


def check_lineage(path: Path, status: dict, topic: str, bootstrap: str, deep_storage: Path) -> None:
    """The publish task's COMPLETE event names the topic (OpenLineage's Kafka naming) with the records read, and the
    datasource's folder with the rows and bytes published and its segments' columns: as `ingest status` says."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    (event,) = [e for e in events if e.get("eventType") == "COMPLETE" and e["job"]["name"] == f"{DATASOURCE}.publish"]
    run = next(r for r in status["payload"]["recentRuns"] if r["runId"] == run_id_of(status))["published"]
    (source,) = event["inputs"]
    assert (source["namespace"], source["name"]) == (f"kafka://{bootstrap}", topic)
    assert source["inputFacets"]["inputStatistics"]["rowCount"] == run["records"] == PER_RUN
    (output,) = event["outputs"]
    assert (output["namespace"], output["name"]) == ("file", str(deep_storage / DATASOURCE))
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == run["rows"] > 0
    assert output["outputFacets"]["outputStatistics"]["size"] == run["bytes"]
    fields = [f["name"] for f in output["facets"]["schema"]["fields"]]
    assert fields[0] == "__time" and {"channel", "page", "edits", "added"} <= set(fields)
