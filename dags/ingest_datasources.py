"""Keeps one generated Airflow DAG file per datasource spec in this folder (YAML or JSON, any depth) under .ingest/
(ingest_core/provider/dag_files.py): each spec parses in a process of its own. Airflow's `dags-folder` bundle
does it before listing files when it is ingest's SpecDagBundle (docs/datasources.md); under any other bundle
this file does it each time Airflow parses it. It defines no DAG.
(Airflow only parses files that mention both "airflow" and "dag".)"""

from pathlib import Path

from ingest_core.provider.dag_files import sync_dag_files

sync_dag_files(Path(__file__).resolve().parent)
