"""The UI plugin's apps as Airflow's api-server serves them, each loaded at its first request. Airflow imports its
plugins in every process that loads them (the CLI, `airflow dags test`, the scheduler...), and the apps' modules
load the SQL surface and the supervisor: about 1.7 s each time. Only the API server serves them.

- `UiApp`: `ingest_core.provider.plugins.ui`, mounted under the plugin's url_prefix `/ingest`.
- `DruidPaths`: Druid's own paths (`/druid/...`, `/status`, `/status/...`: `ingest_core.provider.plugins.druid_paths`).
  A plugin's app is mounted under a prefix, and a Starlette mount never matches its bare prefix: `/status` itself
  would still reach Airflow's catch-all UI route (its HTML page, with 200). So Druid's paths are a root middleware
  (the plugin's `fastapi_root_middlewares`), which sees every request before Airflow's routes and hands on the rest.
  Neither `/druid` nor `/status` is one of Airflow's routes or UI pages (Airflow 3.3: `/api/v2`, `/ui`, `/auth`,
  `/execution`, `/static`, `/health`, the UI's pages); both reached only that catch-all.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from typing import Any


class LazyApp:
    """An ASGI app that imports `module` at its first request and hands every request to its `app`."""

    def __init__(self, module: str) -> None:
        self.module = module
        self._app: Any = None
        self._lock = threading.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        app = self._app or await asyncio.to_thread(self.load)
        await app(scope, receive, send)

    def load(self) -> Any:
        with self._lock:
            if self._app is None:
                self._app = importlib.import_module(self.module).app
        return self._app


class UiApp(LazyApp):
    """The plugin's pages and its REST API under /ingest (Airflow mounts any ASGI app under a url_prefix)."""

    def __init__(self) -> None:
        super().__init__("ingest_core.provider.plugins.ui")


DRUID_PREFIXES = ("/druid", "/status")  # a path that is one of these, or under one, is Druid's


def is_druid_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in DRUID_PREFIXES)


class DruidPaths:
    """A root middleware (Airflow adds it as `app.add_middleware(DruidPaths)`): Druid's paths go to the Druid app,
    every other request on to Airflow's."""

    druid = LazyApp("ingest_core.provider.plugins.druid_paths")

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and is_druid_path(_route_path(scope)):
            await self.druid(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def _route_path(scope: dict) -> str:
    """The path below Airflow's own root path (`[api] base_url`), as Starlette's routing reads it."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path
