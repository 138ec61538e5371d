"""HTTP Basic credentials, as Druid's clients send them (pydruid's `user`/`password`, Superset's
`druid://user:pass@host:port/druid/v2/sql`), checked by Airflow's configured auth manager: its own login
(FAB's users, in its database or LDAP; the simple auth manager's users and passwords file) gives a JWT, and the
request goes on as one that sent that JWT, with the same per-DAG permissions.

A password is checked once a minute at most (`REMEMBERED_S`): FAB hashes it slowly on purpose and writes each login
to its database, and a DB-API client sends it with every query. What is remembered is a keyed digest of the
credentials (the key lives in this process only), never the password; a changed or removed password stops
working within that minute. A password is never logged nor put in an error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from fastapi import HTTPException

from ingest_core.core.errors import shown

REMEMBERED_S = 60.0
_KEY = os.urandom(32)


class CredentialsError(Exception):
    """Basic credentials that are malformed, wrong, or that this auth manager cannot check: a 401."""


@dataclass(frozen=True)
class BasicCredentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never the password, whoever prints it
        return f"BasicCredentials(username={self.username!r})"

    @classmethod
    def parse(cls, value: str) -> "BasicCredentials":
        """The credentials of an `Authorization: Basic ...` header's value (base64 of `user:password`)."""
        try:
            text = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise CredentialsError("the Basic credentials are not base64 of user:password in UTF-8") from None
        username, colon, password = text.partition(":")
        if not colon or not username:
            raise CredentialsError("the Basic credentials are not user:password")
        return cls(username, password)

    def digest(self) -> bytes:
        return hmac.new(_KEY, f"{self.username}\0{self.password}".encode(), hashlib.sha256).digest()


_remembered: dict[bytes, tuple[float, str]] = {}  # digest -> (until, JWT)
_lock = threading.Lock()


def token_for(credentials: BasicCredentials) -> str:
    """A JWT of the auth manager for these credentials (blocking: a database and a slow hash), or
    `CredentialsError`."""
    key, now = credentials.digest(), time.monotonic()
    with _lock:
        for k in [k for k, (until, _) in _remembered.items() if until <= now]:
            del _remembered[k]
        if key in _remembered:
            return _remembered[key][1]
    token = _login(credentials)
    with _lock:
        _remembered[key] = (now + REMEMBERED_S, token)
    return token


def _login(credentials: BasicCredentials) -> str:
    kinds = {c.__name__ for c in type(get_auth_manager()).__mro__}  # a subclass of either logs in as it does
    wrong = CredentialsError(f"wrong user name or password for {shown(credentials.username)}")
    if "FabAuthManager" in kinds:
        from airflow.providers.fab.auth_manager.api_fastapi.routes.login import _get_flask_app
        from airflow.providers.fab.auth_manager.api_fastapi.services.login import FABAuthManagerLogin

        try:
            with _get_flask_app().app_context():
                return FABAuthManagerLogin.create_token(
                    headers={}, body={"username": credentials.username, "password": credentials.password}
                ).access_token
        except HTTPException as exc:
            raise (wrong if exc.status_code == 401 else CredentialsError(str(exc.detail))) from None
    if "SimpleAuthManager" in kinds:
        from airflow.api_fastapi.auth.managers.simple.datamodels.login import LoginBody
        from airflow.api_fastapi.auth.managers.simple.services.login import SimpleAuthManagerLogin

        try:
            return SimpleAuthManagerLogin.create_token(LoginBody(username=credentials.username,
                                                                 password=credentials.password))
        except HTTPException as exc:
            raise (wrong if exc.status_code == 401 else CredentialsError(str(exc.detail))) from None
    raise CredentialsError(f"Airflow's auth manager here ({type(get_auth_manager()).__name__}) takes no passwords from this server: send its "
                           "JWT instead (Authorization: Bearer TOKEN; pydruid's jwt=)")


async def user_for(credentials: BasicCredentials) -> Any:
    """The auth manager's user for these credentials, as for a request that sent its JWT."""
    token = await asyncio.to_thread(token_for, credentials)
    return await get_auth_manager().get_user_from_token(token)
