"""Who may see and act on which datasource, in the plugin's routes: the configured Airflow auth manager's DAG
permissions (the DAG id is the datasource name), read from the route's path and never from the query string.

Airflow's `requires_access_dag` reads `?dag_id=` when a route has no `dag_id` in its path: on a list route that
let `?dag_id=X` stand for every datasource. Here a route with a datasource in its path is checked against that
datasource; a list route only needs a signed-in user and shows the datasources it may read (`readable`).
A refused action is written to the audit log (who, which datasource, which action).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import HTTPException, Request

REFUSED = "refused"  # the audit action of a refused action; its details name the action


def _team_names(names: Iterable[str]) -> dict[str, str | None]:
    from airflow.models.dag import DagModel

    return DagModel.get_dag_id_to_team_name_mapping(list(names))


def readable(user: Any, names: Iterable[str]) -> list[str]:
    """`names` (datasources) the user may read, in their order. Asked of the auth manager by name
    (`filter_authorized_dag_ids`, per team), not as `get_authorized_dag_ids`: that lists only DAGs in Airflow's
    database, and a datasource whose spec is gone still has a status to show to those who may read its DAG."""
    names = list(names)
    by_team: dict[str | None, set[str]] = defaultdict(set)
    teams = _team_names(names)
    for name in names:
        by_team[teams.get(name)].add(name)
    manager = get_auth_manager()
    allowed = set().union(*(manager.filter_authorized_dag_ids(dag_ids=ids, user=user, method="GET", team_name=team)
                            for team, ids in by_team.items()))
    return [n for n in names if n in allowed]


def requires_datasource(method: str, on_refused: Callable[[str, str, Any], None] | None = None):
    """A route dependency: the user may `method` ("GET" read, "PUT" act) the datasource of the path's `dag_id`.
    `on_refused(datasource, action, user)` is called before a refusal (the audit)."""

    def check(request: Request, user: GetUserDep) -> None:
        name = request.path_params.get("dag_id")
        if name is None:  # fail closed: a route without a datasource in its path lists, and filters by `readable`
            raise HTTPException(500, f"{request.url.path}: this route names no datasource ({{dag_id}}) to check")
        details = DagDetails(id=name, team_name=_team_names([name]).get(name))
        if get_auth_manager().is_authorized_dag(method=method, details=details, user=user):
            return
        action = request.path_params.get("action") or request.url.path.rstrip("/").rsplit("/", 1)[-1]
        if on_refused is not None:
            on_refused(name, action, user)
        verb = "read" if method == "GET" else f"{action} (edit)"
        raise HTTPException(403, f"{user.get_name()} may not {verb} datasource {name!r}: that needs the "
                                 f"{'read' if method == 'GET' else 'edit'} permission on DAG {name!r} in Airflow")

    return check
