"""The UI plugin as Airflow loads it (`plugins/ingest_plugin.py`): importing it does not load the app's module
(Airflow imports its plugins in each of its processes); the mounted app loads it at its first request and hands
the request on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio, sys
import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

sys.path.insert(0, "plugins")
from ingest_plugin import IngestPlugin

UI = "ingest_core.provider.plugins.ui"
print(UI in sys.modules)
(mounted,) = IngestPlugin.fastapi_apps
app = Starlette(routes=[Mount(mounted["url_prefix"], app=mounted["app"])])  # as Airflow's API server mounts it


async def get(path):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://airflow") as client:
        return await client.get(path)

answer = asyncio.run(get("/ingest/no-such-page"))
print(answer.status_code, answer.json(), UI in sys.modules)
"""


def test_the_plugin_loads_its_app_at_the_first_request_not_at_import(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    at_import, after_request = done.stdout.strip().splitlines()[-2:]
    assert at_import == "False"
    # FastAPI's own 404 (a JSON detail): the request reached the plugin's app, which was loaded for it
    assert after_request == "404 {'detail': 'Not Found'} True"
