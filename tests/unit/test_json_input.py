"""A client's JSON (`core.json_input`): strict, bounded in depth, never a RecursionError; checked with generated
documents against the standard library's parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest_core.core.json_input import MAX_DEPTH, JsonInputError, JsonTooDeepError, depth, loads


@pytest.mark.parametrize("raw", [b"[" * 100_000 + b"]" * 100_000, b'{"a": ' * 2000 + b"1" + b"}" * 2000,
                                 b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), b"[" * 100_000])
def test_json_nested_past_the_bound_is_refused_in_one_line(raw):
    with pytest.raises(JsonTooDeepError, match=f"the body nests deeper than {MAX_DEPTH} levels"):
        loads(raw)


@pytest.mark.parametrize("raw, says", [(b"NaN", "a bare NaN"), (b'{"a": -Infinity}', "a bare -Infinity"),
                                       (b"\xff", "not JSON"), (b"{", "not JSON"), (b"1" * 5000, "not JSON")])
def test_what_is_not_strict_json_is_refused(raw, says):
    with pytest.raises(JsonInputError, match=says) as info:
        loads(raw)
    assert not isinstance(info.value, JsonTooDeepError) and len(str(info.value)) < 300


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=5), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=30)


def nesting(value) -> int:
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max(map(nesting, children), default=0)


@given(JSON, st.integers(0, 8))
def test_a_document_within_the_bound_reads_as_the_standard_parser_reads_it(value, bound):
    text = json.dumps(value)
    assert depth(value, 100) == nesting(value)
    if nesting(value) <= bound:
        assert loads(text, max_depth=bound) == json.loads(text)
    else:
        with pytest.raises(JsonTooDeepError):
            loads(text, max_depth=bound)


def body_of(chunks: list[bytes]):
    """A request whose body arrives in these chunks, as the api-server hands it to a route; and the count of
    chunks the route read."""
    from starlette.requests import Request

    read = []

    async def receive():
        read.append(1)
        return {"type": "http.request", "body": chunks[len(read) - 1], "more_body": len(read) < len(chunks)}

    return Request({"type": "http", "method": "POST", "headers": [], "path": "/", "query_string": b""}, receive), read


def test_a_body_past_the_size_bound_is_refused_and_read_no_further_than_the_drain_bound():
    import asyncio

    from ingest_core.core.json_input import MAX_BODY_BYTES
    from ingest_core.provider.plugins.request_body import DRAINED_BYTES, json_body, read_body

    mib = b"x" * 2**20
    request, _ = body_of([mib] * 16)  # 16 MiB: the most a body may be
    assert len(asyncio.run(read_body(request))) == MAX_BODY_BYTES
    request, _ = body_of([mib] * 17)
    with pytest.raises(JsonInputError, match="the body is 17,825,792 bytes or more: this server reads at most"):
        asyncio.run(read_body(request))
    request, read = body_of([mib] * 1000)  # endless, as far as the route can tell: it stops reading past the drain
    with pytest.raises(JsonInputError, match="this server reads at most 16,777,216"):
        asyncio.run(read_body(request))
    assert len(read) == DRAINED_BYTES // len(mib) + 1
    assert asyncio.run(json_body(body_of([b"  "])[0], empty={})) == {}
    assert asyncio.run(json_body(body_of([b'{"a": ', b"[1]}"])[0])) == {"a": [1]}
