"""pydruid's SQLAlchemy dialect as Superset uses it, in the virtualenv of its own that the install makes (SQLAlchemy
1.4, Superset's pin; Makefile: DRUID_CLIENT_VENV): `python tests/druid_sqlalchemy_client.py URL TABLE` connects to
`URL` (druid://USER:PASSWORD@HOST:PORT/druid/v2/sql/), takes Superset's steps (the schemas, their tables, a table's
columns, the table reflected, a query built as Superset builds it) and prints one JSON object: each step's answer
({"ok": ...}) or its error ({"error": "Type: message"}). tests/system/test_permissions.py runs it."""

from __future__ import annotations

import functools
import json
import sys

import requests
import sqlalchemy as sa

DEADLINE_S = 60  # on each of the dialect's requests (pydruid sets none)


def main(url: str, table: str) -> dict:
    requests.post = functools.partial(requests.post, timeout=DEADLINE_S)  # pydruid calls requests.post
    engine = sa.create_engine(url)
    inspector = sa.inspect(engine)
    steps = {
        "get_schema_names": inspector.get_schema_names,
        "get_table_names": lambda: inspector.get_table_names(schema="druid"),
        "get_columns": lambda: [(c["name"], type(c["type"]).__name__)
                                for c in inspector.get_columns(table, schema="druid")],
        "reflect": lambda: [c.name for c in sa.Table(table, sa.MetaData(), autoload_with=engine,
                                                     schema="druid").columns],
        "query": lambda: _query(engine, table),
    }
    out = {}
    for name, step in steps.items():
        try:
            out[name] = {"ok": step()}
        except Exception as exc:  # noqa: BLE001 - the test reads each step's error
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _query(engine: sa.engine.Engine, table: str) -> list:
    """A chart's query as Superset builds it: columns of a table, a sum grouped by a dimension, ordered."""
    t = sa.table(table, sa.column("srcIP"), sa.column("bytes"), schema="druid")
    total = sa.func.sum(t.c.bytes).label("total")
    with engine.connect() as conn:
        return [list(r) for r in conn.execute(sa.select([t.c.srcIP, total]).group_by(t.c.srcIP).order_by(
            t.c.srcIP))]


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
