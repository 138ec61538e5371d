"""Airflow import errors for the datasource specs in this folder that do not load, each with its file, field
path and what to write instead; see ingest_core/provider/dag_factory.py. This file defines no DAG, so its
import error hides none (the DAGs are in ingest_datasources.py). (Airflow only parses files that mention both
"airflow" and "dag".)"""

from pathlib import Path

from ingest_core.provider.dag_factory import raise_spec_errors

raise_spec_errors(Path(__file__).resolve().parent)
