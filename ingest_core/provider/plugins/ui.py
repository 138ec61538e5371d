"""The REST API and pages of the Airflow UI plugin (`plugins/ingest_plugin.py`): Druid's supervisor API.

Mounted by Airflow's api-server under `/ingest`. Plugin FastAPI apps get no authentication from Airflow, so
every route here depends on Airflow's own: a JWT (bearer token or the UI's session cookie) checked by the
configured auth manager, with DAG permissions (read to see a datasource, edit to act on it; the DAG id is the
datasource name): `permissions`. Lists show only the datasources the user may read; a refused action is audited.

  GET  /ingest/api/v1/supervisor                    datasource names (?full: their status reports)
  GET  /ingest/api/v1/supervisor/{id}/status        Druid's status report
  GET  /ingest/api/v1/supervisor/{id}/health        200 healthy, 503 not
  POST /ingest/api/v1/supervisor/{id}/suspend | resume | terminate (or shutdown, Druid's older name) | reset
  POST /ingest/api/v1/supervisor/{id}/resetOffsets  Druid's body: {"type": "kafka", "partitions": {"type":
       "end", "stream": TOPIC, "partitionOffsetMap": {"0": 100}}}; an offset may be "earliest" or "latest";
       "force": true sets offsets the broker check refuses, "confirmDuplicates": N runs a move that ingests N
       published records again, "confirmSkip": N one that skips N records nothing ingested (reset takes both too).
       Refused for duplicates or skipped records: 409 with the number ("duplicates", "skipped")
  POST /ingest/api/v1/sql                           Druid's SQL API, read-only (`service.sql_api`: query,
       parameters, context, header, typesHeader, sqlTypesHeader, resultFormat) over the datasources the user may
       read (`query.engine`), within the server's `SqlLimits`, in a worker process of its own (`service.sql_worker`)
       killed at its time limit and when its client goes away
  DELETE /ingest/api/v1/sql/{sqlQueryId}            Druid's cancel: 202, or 404 (no such query of this user's)
  GET  /ingest/ui/datasources, /ingest/ui/datasources/{id}, /ingest/ui/datasources/{id}/query   the pages

The same routes at Druid's paths, with Basic credentials and Druid's error JSON: `druid_paths`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import html
import json
import threading
from typing import Any, Literal, get_args
from urllib.parse import unquote_plus

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ingest_core.core import json_input
from ingest_core.core.errors import (DuplicatesNotConfirmedError, IngestError, SkipNotConfirmedError,
                                     UnknownDatasourceError, shown)
from ingest_core.core.json_input import JsonInputError, JsonTooDeepError
from ingest_core.core.periods import format_datetime
from ingest_core.core.settings import Settings
from ingest_core.core.spec import DatasourceSpec, find_spec_files
from ingest_core.provider.plugins.charts import history_charts, lag_sparkline, seconds
from ingest_core.provider.plugins.permissions import REFUSED, readable, requires_datasource
from ingest_core.provider.plugins.request_body import json_body, read_body
from ingest_core.service.run_history import RunPoint, collect_run_history
from ingest_core.service.sql_api import SqlApiError, SqlRequest, invalid
from ingest_core.service.sql_forkserver import ForkServer, ForkServerError
from ingest_core.service.sql_worker import SqlJob, SqlWorker, WorkerResult
from ingest_core.service.status import StatusReport, collect_status, collect_statuses, specs_in
from ingest_core.store.metadata import MetadataStore
from ingest_core.query.errors import DatasourceNotReadable, SqlCancelledError, SqlError, SqlTimeLimitError
from ingest_core.query.limits import CANCELLED, CLIENT_GONE, QueryCancel, SqlLimits
from ingest_core.query.results import CONTENT_TYPES, write_result
from ingest_core.supervisor.actions import DatasourceActions, druid_json_object, druid_offset_requests
from ingest_core.supervisor.planning import spec_for

app = FastAPI(title="Ingest datasources", description=__doc__)


SWITCH = Literal["suspend", "resume", "terminate", "shutdown"]  # the actions of `supervisor_action`
ACTIONS = {*get_args(SWITCH), "reset", "resetOffsets"}  # every route WRITE guards


def _audit_refusal(name: str, action: str, user: Any) -> None:
    """Only a route's real action is audited (the permission check runs before FastAPI refuses an unknown one),
    so nobody writes audit rows at will; the store cuts a long name to its column."""
    if action in ACTIONS:
        shared_store().audit_log.write(name, REFUSED, {"action": action, "reason": "no edit permission on the DAG"},
                                 user.get_name())


# Routes with a datasource (`{dag_id}`) in their path; list routes take `user: GetUserDep` and filter by `readable`.
READ = [Depends(requires_datasource("GET"))]
WRITE = [Depends(requires_datasource("PUT", on_refused=_audit_refusal))]


class AirflowDbDags:
    """Pauses DAGs in Airflow's database: the api-server has it at hand."""

    def set_paused(self, dag_id: str, paused: bool) -> None:
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session

        with create_session() as session:
            session.query(DagModel).filter(DagModel.dag_id == dag_id).update({DagModel.is_paused: paused})


def shared_store() -> MetadataStore:
    store = MetadataStore.shared(Settings.from_env().metadata_url)  # one engine for every request
    store.check_schema()
    return store


def _dags_folder() -> str:
    from airflow.configuration import conf

    return conf.get("core", "dags_folder")


def _specs() -> dict[str, DatasourceSpec]:
    """The DAG folder's specs, parsed again only when a spec file changed (or one came or went)."""
    folder = _dags_folder()
    return dict(_parsed_specs(folder, _spec_files_state(folder)))


def _spec_files_state(folder: str) -> tuple:
    """What the specs of `folder` depend on: each spec file and a digest of its content (not its mtime, which a
    quick edit may leave unchanged)."""
    state = []
    for path in find_spec_files(folder):
        try:
            state.append((str(path), hashlib.sha256(path.read_bytes()).hexdigest()))
        except OSError:  # gone since it was listed
            continue
    return tuple(state)


@functools.lru_cache(maxsize=1)
def _parsed_specs(folder: str, state: tuple) -> dict[str, DatasourceSpec]:
    return specs_in(folder)


def http_error(exc: IngestError, status: int, user: Any) -> HTTPException:
    """An unknown datasource is 404 on every route (the CLI's exit code 2), with the CLI's did-you-mean among the
    datasources the user may read (never one it may not)."""
    if isinstance(exc, UnknownDatasourceError):
        return HTTPException(404, str(UnknownDatasourceError(exc.name, readable(user, exc.known))))
    return HTTPException(status, str(exc))


KAFKA_TIMEOUT_S = 5.0  # a page waits at most this long on a broker that does not answer


def _status(store: MetadataStore, name: str, user: Any, specs: dict | None = None) -> StatusReport:
    specs = _specs() if specs is None else specs
    try:
        return collect_status(store, name, spec_for(store, name, specs), kafka_timeout_s=KAFKA_TIMEOUT_S)
    except IngestError as exc:
        raise http_error(exc, 404, user) from None


def statuses(store: MetadataStore, names: list[str], user: Any) -> list[StatusReport]:
    """Several datasources' status, their brokers asked at once (`collect_statuses`)."""
    try:
        return collect_statuses(store, names, _specs(), kafka_timeout_s=KAFKA_TIMEOUT_S)
    except IngestError as exc:
        raise http_error(exc, 404, user) from None


def _actions(store: MetadataStore, user: Any) -> DatasourceActions:
    return DatasourceActions(store, AirflowDbDags(), actor=user.get_name(), specs=_specs())


def _act(call, user: Any) -> dict:
    try:
        result = call()
    except DuplicatesNotConfirmedError as exc:  # the UI asks for the number and posts it back
        raise HTTPException(409, {"message": str(exc), "duplicates": exc.duplicates}) from None
    except SkipNotConfirmedError as exc:
        raise HTTPException(409, {"message": str(exc), "skipped": exc.skipped}) from None
    except IngestError as exc:
        raise http_error(exc, 400, user) from None
    # warnings: records lost, a consumer group the action could not update
    return {"id": result.datasource, "action": result.action, **result.details, "warnings": list(result.warnings)}


# ---------------------------------------------------------------------------------------------- REST


@app.get("/api/v1/supervisor")
def list_supervisors(user: GetUserDep, full: bool = False) -> Any:
    store = shared_store()
    names = readable(user, (r["name"] for r in store.datasources.all()))
    if not full:
        return names
    return [r.to_json() for r in statuses(store, names, user)]


@app.get("/api/v1/supervisor/{dag_id}/status", dependencies=READ)
def supervisor_status(dag_id: str, user: GetUserDep) -> dict:
    return _status(shared_store(), dag_id, user).to_json()


@app.get("/api/v1/supervisor/{dag_id}/health", dependencies=READ)
def supervisor_health(dag_id: str, user: GetUserDep) -> JSONResponse:
    report = _status(shared_store(), dag_id, user)
    return JSONResponse({"healthy": report.healthy, "state": report.state, "detailedState": report.detailed_state},
                        status_code=200 if report.healthy else 503)


def _confirmed(body: Any, key: str = "confirmDuplicates") -> int | None:
    """The body's "confirmDuplicates" or "confirmSkip" (`offsets.check_duplicates_confirmed`,
    `check_skip_confirmed`)."""
    value = body.get(key) if isinstance(body, dict) else None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise HTTPException(400, f'"{key}" must be a whole number: the records the refusal counted')
    return value


@app.post("/api/v1/supervisor/{dag_id}/resetOffsets", dependencies=WRITE)
async def supervisor_reset_offsets(dag_id: str, request: Request, user: GetUserDep) -> dict:
    try:
        body = druid_json_object(await read_body(request))
        new = druid_offset_requests(body)
    except IngestError as exc:
        raise HTTPException(400, str(exc)) from None
    force, confirm, skip = body.get("force") is True, _confirmed(body), _confirmed(body, "confirmSkip")
    store = shared_store()
    return _act(lambda: _actions(store, user).set_offsets(dag_id, new, spec_for(store, dag_id, _specs()),
                                                          force=force, confirm_duplicates=confirm,
                                                          confirm_skip=skip), user)


@app.post("/api/v1/supervisor/{dag_id}/reset", dependencies=WRITE)
async def supervisor_reset(dag_id: str, request: Request, user: GetUserDep) -> dict:
    """Druid's hard reset; the body may hold "confirmDuplicates" (a reset from earliest re-reads) and
    "confirmSkip" (one from latest skips)."""
    try:
        body = await json_body(request, empty={})
    except JsonInputError as exc:
        raise HTTPException(400, f'{exc}: expected no body or {{"confirmDuplicates": N, "confirmSkip": N}}') from None
    confirm, skip, store = _confirmed(body), _confirmed(body, "confirmSkip"), shared_store()
    return _act(lambda: _actions(store, user).reset(dag_id, spec_for(store, dag_id, _specs()),
                                                    confirm_duplicates=confirm, confirm_skip=skip), user)


@app.post("/api/v1/supervisor/{dag_id}/{action}", dependencies=WRITE)
def supervisor_action(dag_id: str, action: SWITCH, user: GetUserDep) -> dict:
    method = "terminate" if action == "shutdown" else action  # Druid's older name for terminate
    return _act(lambda: getattr(_actions(shared_store(), user), method)(dag_id), user)


# the queries running now, by sqlQueryId, with who sent them: Druid's DELETE /druid/v2/sql/{sqlQueryId}
_RUNNING: dict[str, list[tuple[str, QueryCancel]]] = {}
_RUNNING_LOCK = threading.Lock()


@contextlib.contextmanager
def _running(query_id: str, who: str, cancel: QueryCancel, max_concurrent: int):
    """The query in `_RUNNING` while it runs; refused (Druid's 429) when `max_concurrent` already run."""
    with _RUNNING_LOCK:
        if sum(map(len, _RUNNING.values())) >= max_concurrent:
            raise SqlApiError(429, "capacityExceeded", "CAPACITY_EXCEEDED",
                              f"{max_concurrent} queries are running, as many as this server runs at once "
                              "(INGEST_SQL_MAX_CONCURRENT): try again when one has ended")
        _RUNNING.setdefault(query_id, []).append((who, cancel))
    try:
        yield
    finally:
        with _RUNNING_LOCK:
            _RUNNING[query_id].remove((who, cancel))
            if not _RUNNING[query_id]:
                del _RUNNING[query_id]


class _Readable:
    """Whether the user may read a datasource: the store's datasources asked of the auth manager at once (a
    listing asks of each), any other name on its own."""

    def __init__(self, user: Any, store: MetadataStore):
        self.user, self.store, self.known = user, store, {}

    def __call__(self, name: str) -> bool:
        if not self.known:
            names = [d["name"] for d in self.store.datasources.all()]
            allowed = set(readable(self.user, names))
            self.known = {n: n in allowed for n in names}
        if name not in self.known:
            self.known[name] = bool(readable(self.user, [name]))
        return self.known[name]


async def _sql_request(request: Request, limits: SqlLimits) -> SqlRequest:
    """The body as Druid takes it: JSON, or the SQL itself as text/plain or URL-encoded (then as "object")."""
    try:
        raw = await read_body(request)
    except JsonInputError as exc:
        raise invalid(str(exc)) from None
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise invalid("the body is not UTF-8") from None
    if kind == "text/plain":
        return SqlRequest.from_body({"query": text}, limits.max_timeout_s)
    if kind == "application/x-www-form-urlencoded":
        return SqlRequest.from_body({"query": unquote_plus(text)}, limits.max_timeout_s)
    try:
        body = json_input.loads(text)
    except JsonTooDeepError as exc:
        raise invalid(str(exc)) from None
    except JsonInputError:  # not JSON: the request's message says what a body is
        body = None
    return SqlRequest.from_body(body, limits.max_timeout_s)


async def _until_done_or_gone(request: Request, cancel: QueryCancel, call) -> Any:
    """`call()` in a worker thread, cancelled (`QueryCancel`) as soon as the client goes away. The body has been
    read, so what the server receives next is the client's disconnect: it is awaited, not polled
    (`request.is_disconnected()` polls with a zero timeout, which Airflow's middleware stack never answers)."""
    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        cancel.cancel(CLIENT_GONE)

    watcher = asyncio.ensure_future(watch())
    try:
        return await run_in_threadpool(call)
    finally:
        watcher.cancel()


def _api_error(exc: SqlError) -> SqlApiError:
    if isinstance(exc, DatasourceNotReadable):
        return SqlApiError(403, "forbidden", "FORBIDDEN", str(exc))
    if isinstance(exc, SqlTimeLimitError):
        return SqlApiError(504, "timeout", "TIMEOUT", str(exc))
    if isinstance(exc, SqlCancelledError):
        return SqlApiError(500, "canceled", "CANCELED", str(exc))
    if isinstance(exc, ForkServerError):  # the server's fault, not the query's
        return SqlApiError(500, "runtimeFailure", "RUNTIME_FAILURE", str(exc))
    return SqlApiError(400, "invalidInput", "INVALID_INPUT", str(exc))


@app.post("/api/v1/sql")
async def sql_query(request: Request, user: GetUserDep) -> Response:
    """Druid's SQL API, read-only (`service.sql_api`, `query.engine`), each query in a worker process of its own
    (`service.sql_worker`). Only the datasources the user may read can be named (the rest are 403) or are listed;
    errors are Druid's error JSON, one line each."""
    limits = SqlLimits.from_env()
    query_id = ""
    slot = contextlib.ExitStack()  # the query's place among those running: until its body has been sent
    try:
        sql = await _sql_request(request, limits)
        query_id, cancel = sql.query_id, QueryCancel()
        job = SqlJob(Settings.from_env().metadata_url, _dags_folder(), sql.query,
                     functools.partial(write_result, fmt=sql.output), sql.parameters, sql.time_zone, sql.timeout_s,
                     limits.max_rows, limits, asks=True)

        def run() -> WorkerResult:  # in a worker thread: the store's and the worker's calls block
            return SqlWorker(ForkServer.shared()).run(job, may_read=_Readable(user, shared_store()), cancel=cancel)

        slot.enter_context(_running(query_id, user.get_name(), cancel, limits.max_concurrent))
        result = await _until_done_or_gone(request, cancel, run)
    except (SqlError, SqlApiError) as exc:
        slot.close()
        error = exc if isinstance(exc, SqlApiError) else _api_error(exc)
        return JSONResponse(error.to_json(), status_code=error.status, headers={"X-Druid-SQL-Query-Id": query_id})
    except BaseException:
        slot.close()
        raise
    headers = {"X-Druid-SQL-Query-Id": query_id, "X-Ingest-Truncated": "true" if result.truncated else "false",
               "X-Ingest-Max-Rows": str(limits.max_rows), "Content-Length": str(result.size)}
    if sql.header:
        headers["X-Druid-SQL-Header-Included"] = "yes"
    return _Streamed(lambda: (result.close(), slot.close()), _chunks(result), media_type=CONTENT_TYPES[
        sql.result_format], headers=headers)


async def _chunks(result: WorkerResult):
    while (chunk := await run_in_threadpool(next, result.chunks, None)) is not None:
        yield chunk


class _Streamed(StreamingResponse):
    """The worker's body, a chunk at a time; `done()` (its worker ended, its place among the running freed) runs
    however the response ends: sent, cut by a client gone, or never begun."""

    def __init__(self, done, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.done = done

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.done()


@app.delete("/api/v1/sql/{query_id}")
def sql_cancel(query_id: str, user: GetUserDep) -> Response:
    """Druid's cancel: the user's own running queries of that sqlQueryId stop (202); none is 404."""
    with _RUNNING_LOCK:
        mine = [cancel for who, cancel in _RUNNING.get(query_id, []) if who == user.get_name()]
    for cancel in mine:
        cancel.cancel(CANCELLED)
    if not mine:
        error = SqlApiError(404, "notFound", "NOT_FOUND",
                            f"no query of yours with sqlQueryId {shown(query_id)} is running")
        return JSONResponse(error.to_json(), status_code=404)
    return Response(status_code=202)


# ---------------------------------------------------------------------------------------------- pages

_STYLE = """<style>
body{font-family:system-ui,sans-serif;margin:16px;color:#1f2937}
table{border-collapse:collapse;margin:8px 0 16px}th,td{border-bottom:1px solid #e5e7eb;padding:6px 10px;text-align:left}
th{background:#f3f4f6}.ok{color:#047857}.bad{color:#b91c1c;font-weight:600}td.n{text-align:right}
pre{background:#f9fafb;padding:8px;overflow:auto}button{margin-right:4px}
</style>"""


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                        f"{_STYLE}</head><body><h2>{html.escape(title)}</h2>{body}"
                        f"<script>{_ACTIONS_JS}</script></body></html>")


# Actions post with the UI's session cookie (same origin), which the routes above authenticate.
_ACTIONS_JS = """
async function act(id, action, confirm) {
  if (confirm === undefined && ["reset", "terminate"].includes(action) && prompt(`Type ${id} to ${action} it`) !== id) return;
  const r = await fetch(`/ingest/api/v1/supervisor/${encodeURIComponent(id)}/${action}`, {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(confirm || {})});
  const body = await r.json();
  // it would ingest published records again, or skip records: the operator confirms the number, as the CLI's
  // --confirm-duplicates / --confirm-skip
  for (const [key, field, what] of [["confirmDuplicates", "duplicates", "ingest them again"],
                                    ["confirmSkip", "skipped", "skip them (they are lost)"]]) {
    if (r.status === 409 && body.detail && body.detail[field] !== undefined) {
      const n = body.detail[field];
      if (prompt(`${body.detail.message}\n\nType ${n} to ${what}`) !== String(n)) return;
      return act(id, action, {...confirm, [key]: n});
    }
  }
  alert(r.ok ? `${action}: ${body.state || "done"}` : `${action} failed: ${body.detail}`);
  location.reload();
}"""


def _cell(value: Any, cls: str = "") -> str:
    return f"<td class='{cls}'>{html.escape(str(value))}</td>"


@app.get("/ui/datasources", response_class=HTMLResponse)
def datasources_page(user: GetUserDep) -> HTMLResponse:
    store = shared_store()
    rows = []
    for r in statuses(store, readable(user, (d["name"] for d in store.datasources.all())), user):
        segs = store.segment_records.of(r.datasource)
        published = next((x.published_at for x in r.recent_runs if x.published_at), None)
        name = html.escape(r.datasource)
        rows.append(
            "<tr>" + f"<td><a href='/ingest/ui/datasources/{name}'>{name}</a></td>"
            + _cell(r.state, "ok" if r.healthy else "bad") + _cell(r.detailed_state)
            + _cell("yes" if r.healthy else "NO", "ok" if r.healthy else "bad")
            + _cell("?" if r.aggregate_lag is None else f"{r.aggregate_lag:,}", "n")
            + _cell(format_datetime(published) if published else "-")
            + _cell(f"{sum(s.num_rows for s in segs):,}", "n") + _cell(len(segs), "n")
            + f"<td>{lag_sparkline(collect_run_history(store, r.datasource))}</td>"
            + "<td>" + "".join(f"<button onclick=\"act('{name}','{a}')\">{a}</button>"
                               for a in ("suspend", "resume", "reset", "terminate")) + "</td></tr>")
    table = ("<table><tr><th>Datasource</th><th>State</th><th>Detailed state</th><th>Healthy</th>"
             "<th>Aggregate lag</th><th>Last publish</th><th>Rows</th><th>Segments</th>"
             "<th>Lag at planning, recent runs</th><th>Actions</th></tr>"
             + "".join(rows) + "</table>") if rows else "<p>No datasources yet: one appears with its first run.</p>"
    return _page("Datasources", table)


def _run_figures(p: RunPoint | None) -> str:
    """A run's charted figures, exactly, as its publish recorded them (the Recent runs table's cells)."""
    if p is None:
        return _cell("-") * 5
    lag = "-" if p.lag is None else ("≥" if p.lag_capped else "") + f"{p.lag:,}"
    return (_cell(lag, "n") + _cell(f"{p.rows:,}", "n") + _cell(p.segments, "n") + _cell(f"{p.bytes:,}", "n")
            + _cell("-" if p.duration_s is None else seconds(p.duration_s), "n"))


@app.get("/ui/datasources/{dag_id}", dependencies=READ, response_class=HTMLResponse)
def datasource_page(dag_id: str, user: GetUserDep) -> HTMLResponse:
    store = shared_store()
    r = _status(store, dag_id, user)
    lag = r.lag or {}
    offsets = "".join(
        "<tr>" + _cell(tp) + _cell(r.committed.get(tp, "-"), "n") + _cell((r.latest or {}).get(tp, "?"), "n")
        + _cell(lag.get(tp, "?"), "n") + "</tr>" for tp in sorted(set(r.committed) | set(r.latest or {})))
    run_history = collect_run_history(store, dag_id)
    charted = {p.run_id: p for p in run_history}
    runs = "".join(
        "<tr>" + _cell(x.run_id) + _cell(x.status) + _cell(x.records, "n") + _run_figures(charted.get(x.run_id))
        + _cell(", ".join(f"{k} {v}" for k, v in sorted(x.row_stats.items())) or "-") + _cell(x.error or "")
        + "</tr>" for x in r.recent_runs)
    active = "".join(
        "<tr>" + _cell(run_id) + _cell(g.group_id, "n") + _cell(f"{g.records:,} / {g.planned:,}", "n")
        + _cell(f"{g.records_per_s:,.0f}", "n") + _cell(f"{g.remaining:,}", "n")
        + _cell(f"{g.splits_done} / {g.splits}", "n") + "</tr>" for run_id, groups in r.active.items() for g in groups)
    errors = "".join(f"<li>{html.escape(format_datetime(e.timestamp))} {html.escape(e.title)}: "
                     f"{html.escape(e.message)}"
                     + (f"<br>records: <code>{html.escape(e.failure.describe_records())}</code>" if e.failure else "")
                     + "</li>" for e in r.recent_errors)
    errors += "".join(f"<li>skipped (lost, <code>ingest skip</code>): {html.escape(str(tp))}: {n:,} records</li>"
                      for tp, n in sorted(r.skipped.items()))
    lost = ("<p class='bad'>Lost records: " + f"{r.lost_records:,}" + " (read nowhere: "
            + ", ".join(f"{html.escape(str(tp))} {n:,}" for tp, n in sorted(r.lost.items()))
            + "; the recent errors say which offsets and why)</p>") if r.lost else ""
    warnings = "".join(f"<li><code>{html.escape(w.path)}</code>: {html.escape(w.message)}</li>"
                       for w in r.spec_warnings)
    history = store.datasources.spec_history(dag_id)
    spec = json.dumps(history[-1]["spec"], indent=2) if history else "(no spec registered yet)"
    body = (f"<p><a href='/ingest/ui/datasources/{html.escape(dag_id)}/query'>Query (SQL)</a></p>"
            f"<p>State <b class='{'ok' if r.healthy else 'bad'}'>{html.escape(r.state)}</b> "
            f"({html.escape(r.detailed_state)}), stream <code>{html.escape(r.stream)}</code>, aggregate lag "
            f"<b>{'?' if r.aggregate_lag is None else f'{r.aggregate_lag:,}'}</b></p>" + lost
            + history_charts(run_history)
            + (("<h3>In flight</h3><table><tr><th>Run</th><th>Group</th><th>Records read</th><th>Records/s</th>"
                 f"<th>Lag</th><th>Splits done</th></tr>{active}</table>") if active else "")
            + "<h3>Offsets</h3><table><tr><th>Partition</th><th>Committed</th><th>Latest</th><th>Lag</th></tr>"
            f"{offsets}</table><h3>Recent runs</h3><table><tr><th>Run</th><th>Status</th><th>Records</th>"
            "<th>Lag at planning</th><th>Rows published</th><th>Segments</th><th>Bytes</th><th>Duration</th>"
            f"<th>Row stats</th><th>Error</th></tr>{runs}</table>"
            + (f"<h3>Recent errors</h3><ul>{errors}</ul>" if errors else "")
            + (f"<h3>Spec warnings</h3><ul>{warnings}</ul>" if warnings else "")
            + f"<h3>Spec (version {history[-1]['version'] if history else '-'})</h3><pre>{html.escape(spec)}</pre>")
    return _page(f"Datasource {dag_id}", body)


# The query view: posts to the SQL API with the UI's session cookie, as the actions do; values are set as text
# (never as HTML), so a value cannot inject markup. Ctrl+Enter runs; Cancel is Druid's DELETE of the sqlQueryId.
_QUERY_JS = """
let running = null;
function show(text, cls) {
  const s = document.getElementById("sql-status"); s.textContent = text; s.className = cls || "";
}
async function runSql() {
  const id = "ui-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2, 10);
  const out = document.getElementById("sql-result");
  out.textContent = ""; show("Running...");
  running = id;
  const started = performance.now();
  let r, body;
  try {
    r = await fetch("/ingest/api/v1/sql", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({query: document.getElementById("sql").value, resultFormat: "array", header: true,
                            sqlTypesHeader: true, context: {sqlQueryId: id}})});
    body = await r.json();
  } catch (e) { running = null; show(`Error: ${e}`, "bad"); return; }
  running = null;
  const secs = ((performance.now() - started) / 1000).toFixed(2);
  if (!r.ok) { show(`Error: ${body.errorMessage || body.detail || r.status}`, "bad"); return; }
  const [names, types, ...rows] = body;
  const table = document.createElement("table"); table.id = "sql-table";
  const head = table.insertRow();
  names.forEach((n, i) => {
    const th = document.createElement("th"); th.textContent = n; th.title = types[i]; head.appendChild(th);
  });
  for (const row of rows) {
    const tr = table.insertRow();
    row.forEach(v => {
      const td = tr.insertCell();
      td.textContent = v === null ? "null" : typeof v === "object" ? JSON.stringify(v) : String(v);
      if (typeof v === "number") td.className = "n";
    });
  }
  out.appendChild(table);
  const cut = r.headers.get("X-Ingest-Truncated") === "true";
  show(`${rows.length.toLocaleString("en-US")} row${rows.length === 1 ? "" : "s"} in ${secs} s` +
       (cut ? ` (stopped at the row limit: the query has more rows)` : ""), cut ? "bad" : "ok");
}
async function cancelSql() { if (running) await fetch(`/ingest/api/v1/sql/${running}`, {method: "DELETE"}); }
document.getElementById("sql").addEventListener("keydown", e => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) runSql();
});
"""


@app.get("/ui/datasources/{dag_id}/query", dependencies=READ, response_class=HTMLResponse)
def query_page(dag_id: str) -> HTMLResponse:
    """A SQL box over the datasource (and any other the user may read), results as a table, with the limits."""
    limits = SqlLimits.from_env()
    name = html.escape(dag_id)
    default = html.escape(f'SELECT *\nFROM "{dag_id}"\nORDER BY __time DESC\nLIMIT 100')
    body = (f"<p><a href='/ingest/ui/datasources/{name}'>&larr; {name}</a> &middot; SQL over the "
            "visible segments of the datasources you may read; <code>SHOW TABLES</code> lists them, "
            "<code>DESCRIBE \"name\"</code> gives a datasource's columns.</p>"
            f"<p>Time limit <b id='time-limit'>{limits.max_timeout_s:g} s</b> &middot; row limit "
            f"<b id='row-limit'>{limits.max_rows:,} rows</b> (a query stops when either is reached, or when "
            "you leave the page)</p>"
            f"<textarea id='sql' rows='8' cols='110' spellcheck='false'>{default}</textarea><br>"
            "<button id='run' onclick='runSql()'>Run (Ctrl+Enter)</button>"
            "<button id='cancel' onclick='cancelSql()'>Cancel</button> <span id='sql-status'></span>"
            f"<div id='sql-result'></div><script>{_QUERY_JS}</script>")
    return _page(f"Query {dag_id}", body)
