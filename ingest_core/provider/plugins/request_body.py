"""A REST route's request body, kept at most `MAX_BODY_BYTES` (a longer one is refused, never all in memory)
and, for JSON, parsed within `core.json_input`'s bounds. Errors are `JsonInputError`s: each route says
them its own way (the SQL API as Druid's error JSON, the supervisor routes as a 400's detail)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from ingest_core.core import json_input
from ingest_core.core.json_input import MAX_BODY_BYTES, JsonInputError


DRAINED_BYTES = 4 * MAX_BODY_BYTES  # of a body too large, read and dropped so that its client reads the 400


def _too_large(size: int) -> JsonInputError:
    return JsonInputError(f"the body is {size:,} bytes or more: this server reads at most {MAX_BODY_BYTES:,}")


async def read_body(request: Request) -> bytes:
    """The body, kept only while it is within `MAX_BODY_BYTES`. A longer one is refused once it ends: what came
    past the bound is dropped as it arrives (a client that sends a body whole before it reads the answer would
    see its connection reset, not the 400), up to `DRAINED_BYTES`, where the connection is left to fail."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > DRAINED_BYTES:
            break
        if size <= MAX_BODY_BYTES:
            chunks.append(chunk)
        else:
            chunks.clear()
    if size > MAX_BODY_BYTES:
        raise _too_large(size)
    return b"".join(chunks)


async def json_body(request: Request, empty: Any = None) -> Any:
    """The body as JSON; `empty` when there is none (only white space)."""
    raw = await read_body(request)
    return empty if not raw.strip() else json_input.loads(raw)
