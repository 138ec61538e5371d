"""`SpecDagBundle`: Airflow's DAG-folder bundle that keeps the generated DAG files (one per datasource spec,
provider/dag_files.py) in step with the specs whenever Airflow readies or refreshes the bundle.

Airflow calls `initialize` in the dag-processor, in `airflow dags reserialize` and in each task's process
before it reads the bundle's files, and `refresh` every `refresh_interval` seconds before it lists them: so a
new spec's DAG file exists by the time Airflow looks for files, a removed spec's file is gone, and an edited
spec's file is rewritten (a new mtime, parsed first).

Why this module imports dag_factory: the dag-processor imports the bundle's class once, then forks a process
per DAG file, so each generated file's parse starts with Airflow's SDK, the operators and the spec parser
already imported (about 0.6 s each otherwise, 200 times over).

Configured as Airflow's `dags-folder` bundle (`[dag_processor] dag_bundle_config_list`: dag_files.BUNDLE_CONFIG);
`path` and `refresh_interval` as for LocalDagBundle.
"""

from __future__ import annotations

import logging

from airflow.dag_processing.bundles.local import LocalDagBundle

import ingest_core.provider.dag_factory  # noqa: F401 - imported once, before the per-file processes fork
from ingest_core.provider.dag_files import sync_dag_files

log = logging.getLogger(__name__)


class SpecDagBundle(LocalDagBundle):
    """The DAG folder, with a generated DAG file per datasource spec kept in step before Airflow reads it."""

    def initialize(self) -> None:
        self._sync()
        super().initialize()

    def refresh(self) -> None:
        self._sync()

    def _sync(self) -> None:
        from airflow.configuration import conf

        syntax = conf.get("core", "dag_ignore_file_syntax", fallback="glob").strip().lower() or "glob"
        try:
            sync_dag_files(self.path, syntax)
        except OSError as exc:  # a read-only DAG folder: its generated files as they are (written where it was built)
            log.warning("cannot update the generated DAG files under %s: %s", self.path, exc)
