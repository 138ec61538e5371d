"""`make demo`: the spine on embedded defaults, nothing to start by hand.

Starts an embedded Kafka broker, produces a wiki-edit-like stream, registers the example datasource
(`dags/datasources/wikipedia.yaml`) in a SQLite metadata store and plans three microbatches while more data
arrives, printing what each run reads: task groups, splits and offset ranges, pipelined from the previous
run's planned end. Everything lives under $INGEST_HOME (default ./demo-data); rerunning continues there.

The Spark job that reads these ranges and the publish that commits them arrive with the spine's parts 2
and 3; until then the demo stops at the plans and marks its runs as not executed, so a rerun plans again
from the committed offsets.
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .embedded import EmbeddedKafka
from .metadata import MetadataStore, RunStatus
from .offset_reader import KafkaOffsetReader
from .spec import load_spec
from .supervisor import Supervisor

ROOT = Path(__file__).resolve().parents[1]
TOPIC, PARTITIONS = "wikipedia", 4
CHANNELS = ["#en.wikipedia", "#de.wikipedia", "#fr.wikipedia", "#ja.wikipedia"]
PAGES = ["Apache Druid", "Apache Kafka", "Apache Spark", "Apache Airflow", "Parquet", "Exactly-once"]


def wiki_events(n: int, rng: random.Random):
    now = datetime.now(timezone.utc)
    for _ in range(n):
        added = rng.randint(0, 500)
        deleted = rng.randint(0, 200)
        yield {"time": now.isoformat().replace("+00:00", "Z"), "channel": rng.choice(CHANNELS),
               "page": rng.choice(PAGES), "user": f"user{rng.randint(1, 50)}", "namespace": "Main",
               "isRobot": int(rng.random() < 0.1), "added": added, "deleted": deleted, "delta": added - deleted}


def produce(bootstrap: str, n: int, rng: random.Random) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for event in wiki_events(n, rng):
        producer.produce(TOPIC, json.dumps(event).encode(), key=event["page"].encode())
    producer.flush(60)


def main() -> None:
    home = Path(os.environ.get("INGEST_HOME", "demo-data")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    rng = random.Random()
    with EmbeddedKafka(home / "kafka") as kafka:
        os.environ["INGEST_KAFKA_BOOTSTRAP"] = kafka.bootstrap
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        if TOPIC not in admin.list_topics(timeout=10).topics:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
        store = MetadataStore(f"sqlite:///{home / 'metadata.db'}")
        store.upgrade()
        spec = load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml")
        supervisor = Supervisor(spec, store)
        print(f"broker {kafka.bootstrap}, metadata store {store.safe_url}, spec version {supervisor.register()}")
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        planned = []
        for i in range(3):
            produce(kafka.bootstrap, 2000 + 500 * i, rng)
            record = supervisor.plan(f"demo__{stamp}_{i}")
            planned.append(record.run_id)
            plan = record.plan
            print(f"\nrun {plan.run_id}: {plan.records} records in {len(plan.groups)} task groups")
            for g in plan.groups:
                ranges = ", ".join(f"{p.tp}[{p.start},{p.end}) from {p.start_source.value}" for p in g.partitions)
                print(f"  group {g.group_id}: {g.records} records, {len(g.splits)} splits: {ranges}")
        reader = KafkaOffsetReader.for_spec(spec)
        latest = reader.latest(reader.partitions(topic=TOPIC))
        committed = store.committed_offsets(spec.datasource)
        lag = sum(off - (committed[tp].offset if tp in committed else 0) for tp, off in latest.items())
        print(f"\nlatest offsets {{{', '.join(f'{tp}: {o}' for tp, o in sorted(latest.items()))}}}, "
              f"committed {len(committed)} partitions, lag {lag} records")
        for run_id in planned:
            store.set_run_status(spec.datasource, run_id, RunStatus.FAILED,
                                 error="demo: planned only (the Spark job arrives with the spine, part 2)")
        print(f"data in {home}")


if __name__ == "__main__":
    main()
