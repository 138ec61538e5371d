"""The UI plugin's app as Airflow mounts it: loaded at its first request. Airflow imports its plugins in every
process that loads them (the CLI, `airflow dags test`, the scheduler...), and the app's module loads the SQL surface
and the supervisor: about 1.7 s each time. Only the API server serves it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class UiApp:
    """An ASGI app that loads `ingest_core.provider.plugins.ui` and hands it every request (Airflow mounts
    any ASGI app under the plugin's url_prefix)."""

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        app = self._app or await asyncio.to_thread(self.load)
        await app(scope, receive, send)

    def load(self) -> Any:
        with self._lock:
            if self._app is None:
                from ingest_core.provider.plugins.ui import app

                self._app = app
        return self._app
