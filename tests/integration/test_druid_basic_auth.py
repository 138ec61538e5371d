"""HTTP Basic credentials on Druid's paths with Airflow's default auth manager (SimpleAuthManager: its users
setting and passwords file, the demo's), and a route's failure as Druid's 500, in a process of its own with Airflow's database: the plugin's root
middleware in front of an app standing for Airflow's, each request through the real auth manager. FAB's users are
tested on a real api-server (tests/system/test_permissions.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import airflow_db

ROOT = Path(__file__).resolve().parents[2]
SIMPLE = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
PASSWORD = "Alice-pw-9"

PROBE = """
import asyncio, base64, json, sys
import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

sys.path.insert(0, "plugins")
from airflow.api_fastapi.app import init_auth_manager
from ingest_plugin import IngestPlugin

init_auth_manager()
(middleware,) = IngestPlugin.fastapi_root_middlewares
airflow = Starlette(routes=[Route("/{rest:path}", lambda request: PlainTextResponse("airflow's page"))])
airflow.add_middleware(middleware["middleware"])


async def get(path, credentials):
    auth = base64.b64encode(credentials.encode()).decode()
    transport = httpx.ASGITransport(app=airflow, raise_app_exceptions=False)  # a 500 is an answer here
    async with httpx.AsyncClient(transport=transport, base_url="http://airflow", timeout=60) as client:
        r = await client.get(path, headers={"Authorization": f"Basic {auth}"})
        return [r.status_code, r.json()]

for request in sys.argv[1:]:
    print(json.dumps(asyncio.run(get(*request.split(" ")))))
"""


def test_basic_credentials_are_checked_by_the_simple_auth_managers_users_and_passwords(tmp_path):
    home = tmp_path / "airflow"
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({"alice": PASSWORD, "bob": "Bob-pw-1"}))
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE,
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "alice:viewer,bob:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
    airflow_db.migrate(env)  # the JWT's check reads Airflow's revoked tokens
    requests = [f"/status {c}" for c in (f"alice:{PASSWORD}", f"alice:{PASSWORD}", "alice:wrong", "carol:anything",
                                         "bob:Bob-pw-1")]
    # the metadata store out of reach: the route fails, and the answer is still Druid's error JSON, a 500
    env["INGEST_METADATA_URL"] = f"sqlite:///{tmp_path / 'no-such-folder' / 'metadata.db'}"
    requests.append(f"/druid/indexer/v1/supervisor alice:{PASSWORD}")
    done = subprocess.run([sys.executable, "-c", PROBE, *requests], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    *answers, (status, failed) = [json.loads(line) for line in done.stdout.strip().splitlines()[-6:]]
    assert status == 500 and failed["errorCode"] == "runtimeFailure" and failed["errorMessage"] == (
        "MetadataStoreError while serving GET '/druid/indexer/v1/supervisor': see the api-server's log"), failed
    for status, body in answers[:2] + answers[4:]:  # the second time from the remembered check
        assert status == 200 and body["version"], body
    for (status, body), user in zip(answers[2:4], ("alice", "carol")):
        assert status == 401 and body["errorCode"] == "unauthorized", body
        assert body["errorMessage"] == f"wrong user name or password for {user!r}", body
    assert PASSWORD not in done.stdout + done.stderr and "Bob-pw-1" not in done.stdout + done.stderr
