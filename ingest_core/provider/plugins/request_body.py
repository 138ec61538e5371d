"""A REST route's request body, read at most `MAX_BODY_BYTES` (a longer one is refused before it is all in
memory) and, for JSON, parsed within `core.json_input`'s bounds. Errors are `JsonInputError`s: each route says
them its own way (the SQL API as Druid's error JSON, the supervisor routes as a 400's detail)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from ingest_core.core import json_input
from ingest_core.core.json_input import MAX_BODY_BYTES, JsonInputError


def _too_large(size: int) -> JsonInputError:
    return JsonInputError(f"the body is {size:,} bytes or more: this server reads at most {MAX_BODY_BYTES:,}")


async def read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large(int(declared))
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large(size)
        chunks.append(chunk)
    return b"".join(chunks)


async def json_body(request: Request, empty: Any = None) -> Any:
    """The body as JSON; `empty` when there is none (only white space)."""
    raw = await read_body(request)
    return empty if not raw.strip() else json_input.loads(raw)
