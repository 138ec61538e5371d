"""Airflow DAGs: one per datasource spec in this folder (YAML or JSON, any depth); see ingest_core/provider/dag_factory.py.
(Airflow only parses files that mention both "airflow" and "dag".)"""

from pathlib import Path

from ingest_core.provider.dag_factory import load_dags

globals().update(load_dags(Path(__file__).resolve().parent))
