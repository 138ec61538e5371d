"""The Airflow UI plugin: a "Datasources" page (Druid's Supervisors view), an "Ingest" tab on each datasource's
DAG, and Druid's supervisor REST API, all served by `ingest_core.provider.plugins.ui` under /ingest with Airflow's own
authentication and DAG permissions; and Druid's own paths (/druid/v2/sql, /druid/indexer/v1/supervisor, /status) for
Druid's clients, by `ingest_core.provider.plugins.druid_paths`. The apps load at their first request
(`ingest_core.provider.plugins.mount`): Airflow imports this file in each of its processes, and only the API server
serves them. Its listener sends Druid's ingestion metrics through Airflow's `[metrics]` after each run
(`ingest_core.provider.plugins.metrics_listener`)."""

from airflow.plugins_manager import AirflowPlugin

from ingest_core.provider.plugins import metrics_listener
from ingest_core.provider.plugins.mount import DruidPaths, UiApp


class IngestPlugin(AirflowPlugin):
    name = "ingest"
    listeners = [metrics_listener]
    fastapi_apps = [{"app": UiApp(), "url_prefix": "/ingest", "name": "Ingest datasources"}]
    # Druid's paths at the server's root: a middleware, since a mounted app never answers its bare prefix (/status)
    fastapi_root_middlewares = [{"middleware": DruidPaths, "args": [], "kwargs": {}, "name": "Druid's paths"}]
    # hrefs without a leading slash: relative to the UI's base URL, so a reverse proxy prefix still works
    external_views = [
        {"name": "Datasources", "href": "ingest/ui/datasources", "destination": "nav", "category": "browse",
         "url_route": "datasources"},
        {"name": "Ingest", "href": "ingest/ui/datasources/{DAG_ID}", "destination": "dag", "url_route": "ingest"},
    ]
