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


DRUID_PROBE = """
import asyncio, sys
import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

sys.path.insert(0, "plugins")
from ingest_plugin import IngestPlugin

DRUID = "ingest_core.provider.plugins.druid_paths"
(middleware,) = IngestPlugin.fastapi_root_middlewares
# Airflow's app as far as this goes: its catch-all UI route answers every path with its page
airflow = Starlette(routes=[Route("/{rest:path}", lambda request: PlainTextResponse("airflow's page"))])
airflow.add_middleware(middleware["middleware"], *middleware["args"], **middleware["kwargs"])
print(DRUID in sys.modules)


async def get(path):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=airflow), base_url="http://airflow") as client:
        r = await client.get(path)
        return [path, r.status_code, r.text]

for path in ("/status/health", "/status", "/druid/v2/nothing", "/druidish", "/statuses", "/dags/x"):
    print(asyncio.run(get(path)), DRUID in sys.modules)
"""


def test_druids_paths_go_to_the_druid_app_loaded_at_its_first_request_and_the_rest_to_airflow(tmp_path):
    """/status itself is Druid's too (a mounted app never matches its bare prefix: Airflow's page would answer)."""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    done = subprocess.run([sys.executable, "-c", DRUID_PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()[-7:]
    assert lines[0] == "False"
    answers = [eval(line.rsplit(" ", 1)[0]) for line in lines[1:]]  # noqa: S307 - our own probe's lists
    assert answers[0] == ["/status/health", 200, "true"]
    assert answers[1][1] == 401 and '"errorCode":"unauthorized"' in answers[1][2]  # no credentials: Druid's 401
    assert answers[2][1] == 404 and '"errorCode":"notFound"' in answers[2][2]
    assert [a[1:] for a in answers[3:]] == [[200, "airflow's page"]] * 3
    assert lines[-1].endswith("True")


def test_basic_credentials_are_read_as_druids_clients_send_them_and_never_shown():
    import base64

    import pytest

    from ingest_core.provider.plugins.basic_auth import BasicCredentials, CredentialsError

    def header(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    creds = BasicCredentials.parse(header("reader:pa:ss wörd"))
    assert (creds.username, creds.password) == ("reader", "pa:ss wörd")  # a password may hold a colon
    assert "pa:ss" not in repr(creds) and "pa:ss" not in str(creds)
    for bad in ("not base64!", header("no-colon"), header(":no-user"), base64.b64encode(b"\xff:x").decode()):
        with pytest.raises(CredentialsError):
            BasicCredentials.parse(bad)
    assert creds.digest() == BasicCredentials("reader", "pa:ss wörd").digest() != BasicCredentials(
        "reader", "other").digest()
