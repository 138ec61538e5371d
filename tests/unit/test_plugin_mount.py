"""The UI plugin as Airflow loads it (`plugins/ingest_plugin.py`): importing it does not load its apps' modules
(Airflow imports its plugins in each of its processes); the mounted app and the root middleware's Druid app load
at their first request and hand the request on; Basic credentials as Druid's clients send them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio, json, sys
import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

sys.path.insert(0, "plugins")
from ingest_plugin import IngestPlugin

UI, DRUID = "ingest_core.provider.plugins.ui", "ingest_core.provider.plugins.druid_paths"
print(json.dumps([UI in sys.modules, DRUID in sys.modules]))
(mounted,) = IngestPlugin.fastapi_apps
(middleware,) = IngestPlugin.fastapi_root_middlewares
# as Airflow's api-server builds its app: the plugin's app mounted under its prefix, its root middleware around
# everything, and Airflow's catch-all UI route answering every other path with its page
app = Starlette(routes=[Mount(mounted["url_prefix"], app=mounted["app"]),
                        Route("/{rest:path}", lambda request: PlainTextResponse("airflow's page"))])
app.add_middleware(middleware["middleware"], *middleware["args"], **middleware["kwargs"])


async def get(path):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://airflow") as client:
        r = await client.get(path)
        return [path, r.status_code, r.text, UI in sys.modules, DRUID in sys.modules]

for path in ("/ingest/no-such-page", "/status/health", "/status", "/druid/v2/nothing", "/druidish", "/statuses",
             "/dags/x"):
    print(json.dumps(asyncio.run(get(path))))
"""


def test_the_plugin_loads_its_apps_at_their_first_request_and_druids_paths_go_to_the_druid_app(tmp_path):
    """/status itself is Druid's too (a mounted app never matches its bare prefix: Airflow's page would answer)."""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    at_import, *answers = [json.loads(line) for line in done.stdout.strip().splitlines()[-8:]]
    assert at_import == [False, False]
    # FastAPI's own 404 (a JSON detail): the request reached the plugin's app, which was loaded for it (not Druid's)
    assert answers[0] == ["/ingest/no-such-page", 404, '{"detail":"Not Found"}', True, False]
    assert answers[1] == ["/status/health", 200, "true", True, True]
    assert answers[2][1] == 401 and json.loads(answers[2][2])["errorCode"] == "unauthorized"  # Druid's 401
    assert answers[3][1] == 404 and json.loads(answers[3][2])["errorCode"] == "notFound"
    assert [a[1:3] for a in answers[4:]] == [[200, "airflow's page"]] * 3


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
