"""Druid's own paths, for Druid's clients (pydruid, Superset's druid:// dialect, runbooks' curl lines): the same
routes as /ingest/api/v1 (`provider.plugins.ui`, which runs them), at the paths Druid serves them, with Druid's
query flags, Druid's authentication and Druid's error JSON. Served at the api-server's root by the plugin's root
middleware (`provider.plugins.mount.DruidPaths`).

  POST   /druid/v2/sql                                 Druid's SQL API (pydruid posts to /druid/v2/sql/)
  DELETE /druid/v2/sql/{sqlQueryId}                    cancel: 202, or 404
  GET    /druid/indexer/v1/supervisor                  the ids; ?full: each {id, spec, state, detailedState,
         healthy, suspended}; ?state=true: each {id, state, detailedState, healthy, suspended, type, source}
  GET    /druid/indexer/v1/supervisor/{id}             the spec (its latest registered version, secrets redacted)
  GET    /druid/indexer/v1/supervisor/{id}/status      Druid's status report; /health: 200 healthy, 503 not
  POST   /druid/indexer/v1/supervisor/{id}/suspend | resume | terminate | shutdown | reset | resetOffsets
  GET    /status                                       version, modules, memory (a signed-in user)
  GET    /status/health                                true (no credentials, as Druid's)
  GET    /status/selfDiscovered/status                 {"selfDiscovered": true} (no credentials)

Credentials: HTTP Basic (`basic_auth`: the auth manager's users and passwords), a JWT (Authorization: Bearer), or
the UI's session cookie; the same per-DAG permissions as every route of the plugin. Every error, whatever raised
it (FastAPI, Airflow's authentication, a route), is Druid's error JSON (`SqlApiError.to_json`): pydruid reads its
"error" and "errorMessage", Druid's newer clients its "errorCode" and "category". A path under /druid or /status
that is not served is Druid's 404 JSON.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import psutil
from airflow.api_fastapi.core_api.security import GetUserDep, get_user
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials
from starlette.exceptions import HTTPException as StarletteHTTPException

from ingest_core.core.errors import UnknownDatasourceError, shown
from ingest_core.provider.plugins import ui
from ingest_core.provider.plugins.basic_auth import BasicCredentials, CredentialsError, user_for
from ingest_core.provider.plugins.permissions import readable
from ingest_core.service.sql_api import SqlApiError

app = FastAPI(title="Druid's paths", description=__doc__, docs_url=None, redoc_url=None, openapi_url=None)

SQL = "/druid/v2/sql"
SUPERVISOR = "/druid/indexer/v1/supervisor"
DOCS = "docs/druid-tools.md"
# Druid's errorCode and category of each HTTP status these paths answer with
ERRORS = {400: ("invalidInput", "INVALID_INPUT"), 401: ("unauthorized", "UNAUTHORIZED"),
          403: ("forbidden", "FORBIDDEN"), 404: ("notFound", "NOT_FOUND"), 405: ("invalidInput", "INVALID_INPUT"),
          409: ("conflict", "CONFLICT"), 429: ("capacityExceeded", "CAPACITY_EXCEEDED"),
          500: ("runtimeFailure", "RUNTIME_FAILURE"), 503: ("runtimeFailure", "RUNTIME_FAILURE"),
          504: ("timeout", "TIMEOUT")}
SIGN_IN = ("send Basic credentials (pydruid's user= and password=, Superset's druid://USER:PASSWORD@HOST:PORT/"
           "druid/v2/sql) or an Airflow JWT (Authorization: Bearer TOKEN)")


def druid_error(status: int, message: str, context: dict | None = None) -> JSONResponse:
    code, category = ERRORS.get(status, ERRORS[500] if status >= 500 else ERRORS[400])
    headers = {"WWW-Authenticate": 'Basic realm="druid"'} if status == 401 else None
    return JSONResponse(SqlApiError(status, code, category, message, context or {}).to_json(), status_code=status,
                        headers=headers)


async def druid_user(request: Request) -> Any:
    """Airflow's `get_user` (a JWT: bearer or the UI's cookie), and HTTP Basic credentials beside it."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            return await user_for(BasicCredentials.parse(value))
        except CredentialsError as exc:
            raise HTTPException(401, str(exc)) from None
    bearer = HTTPAuthorizationCredentials(scheme="Bearer", credentials=value.strip()) if (
        scheme.lower() == "bearer") else None
    return await get_user(request, _oauth_token=None, bearer_credentials=bearer)


app.dependency_overrides[get_user] = druid_user


# ---------------------------------------------------------------------------------------------- errors


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    detail, context = exc.detail, {}
    if isinstance(detail, dict):  # a refusal that counts: {"message", "duplicates" | "skipped"}
        context = {k: v for k, v in detail.items() if k != "message"}
        detail = detail.get("message", "")
    status, path = exc.status_code, request.url.path
    if status == 403 and detail == "Invalid JWT token":  # Airflow's; for Druid's clients a credential is 401
        status = 401
    if status == 401:
        detail = f"{detail}: {SIGN_IN}" if detail in ("Not authenticated", "Token Expired", "Invalid JWT token") \
            else detail
    elif status == 404 and detail == "Not Found":
        detail = (f"{shown(path)} is not served here: Druid's paths served are {SQL}, {SUPERVISOR} and its "
                  f"sub-routes, /status and /status/health ({DOCS})")
    elif status == 405 and detail == "Method Not Allowed":
        detail = f"{request.method} {shown(path)} is not served here ({DOCS})"
    return druid_error(status, str(detail), context)


@app.exception_handler(RequestValidationError)
async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("loc", ("",))[0] == "path" for e in errors):  # an action that is none of Druid's
        return await _http_error(request, StarletteHTTPException(404))
    first = errors[0] if errors else {}
    where = ".".join(str(x) for x in first.get("loc", ()))
    return druid_error(400, f"{where}: {first.get('msg', 'invalid request')}")


@app.exception_handler(Exception)
async def _server_error(request: Request, exc: Exception) -> JSONResponse:
    return druid_error(500, f"{type(exc).__name__} while serving {request.method} {shown(request.url.path)}: "
                            "see the api-server's log")


# ---------------------------------------------------------------------------------------------- SQL

app.add_api_route(SQL, ui.sql_query, methods=["POST"])
app.add_api_route(SQL + "/", ui.sql_query, methods=["POST"])  # pydruid's default path
app.add_api_route(SQL + "/{query_id}", ui.sql_cancel, methods=["DELETE"])


# ---------------------------------------------------------------------------------------------- supervisors


def _latest_spec(store: Any, name: str) -> dict | None:
    history = store.datasources.spec_history(name)  # redacted again under today's rules
    return history[-1]["spec"] if history else None


@app.get(SUPERVISOR)
def list_supervisors(user: GetUserDep, full: str | None = None, state: str | None = None) -> Any:
    """Druid's flags: `?full` (any value, even none) and `?state=true`."""
    store = ui.shared_store()
    names = readable(user, (r["name"] for r in store.datasources.all()))
    with_state = state is not None and state.lower() == "true"
    if full is None and not with_state:
        return names
    out = []
    for r in ui.statuses(store, names, user):
        item: dict[str, Any] = {"id": r.datasource}
        if full is not None:
            item["spec"] = _latest_spec(store, r.datasource)
        item |= {"state": r.state, "detailedState": r.detailed_state, "healthy": r.healthy,
                 "suspended": r.suspended}
        if with_state:
            item |= {"type": "kafka", "source": r.stream}
        out.append(item)
    return out


@app.post(SUPERVISOR)
def submit_supervisor() -> None:
    raise HTTPException(405, "a supervisor spec is a file in Airflow's DAG folder here, not a POST: put the spec "
                             f"there and its DAG runs it ({DOCS})")


@app.get(SUPERVISOR + "/{dag_id}", dependencies=ui.READ)
def supervisor_spec(dag_id: str, user: GetUserDep) -> Any:
    store = ui.shared_store()
    spec = _latest_spec(store, dag_id)
    if spec is None:
        names = [d["name"] for d in store.datasources.all()]
        raise ui.http_error(UnknownDatasourceError(dag_id, names), 404, user)
    return spec


app.add_api_route(SUPERVISOR + "/{dag_id}/status", ui.supervisor_status, methods=["GET"], dependencies=ui.READ)
app.add_api_route(SUPERVISOR + "/{dag_id}/health", ui.supervisor_health, methods=["GET"], dependencies=ui.READ)
app.add_api_route(SUPERVISOR + "/{dag_id}/resetOffsets", ui.supervisor_reset_offsets, methods=["POST"],
                  dependencies=ui.WRITE)
app.add_api_route(SUPERVISOR + "/{dag_id}/reset", ui.supervisor_reset, methods=["POST"], dependencies=ui.WRITE)
app.add_api_route(SUPERVISOR + "/{dag_id}/{action}", ui.supervisor_action, methods=["POST"], dependencies=ui.WRITE)


# ---------------------------------------------------------------------------------------------- the process


@app.get("/status/health")
def status_health() -> bool:
    return True


@app.get("/status/selfDiscovered/status")
def status_self_discovered() -> dict:
    return {"selfDiscovered": True}


@app.get("/status")
def status(user: GetUserDep) -> dict:
    """Druid's process status: its version, its modules (here: this package and Airflow), its memory."""
    process, machine = psutil.Process(), psutil.virtual_memory()
    modules = [{"name": name, "artifact": name, "version": _version(name)}
               for name in ("kafka-microbatch-ingest", "apache-airflow")]
    return {"version": _version("kafka-microbatch-ingest"), "modules": modules,
            "memory": {"maxMemory": machine.total, "totalMemory": machine.total, "freeMemory": machine.available,
                       "usedMemory": process.memory_info().rss, "directMemory": 0}}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
