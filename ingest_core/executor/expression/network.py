"""Druid's IP address functions on the executors: ipv4_match, ipv4_parse, ipv4_stringify, ipv6_match, per value
(`value_functions`).
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from ingest_core.executor import value_functions
from ingest_core.executor.expression.vectors import per_value


def _ip_match(kind: str) -> Callable[..., Any]:
    def apply(n: int, address: Any, subnet: str) -> Any:
        matcher = (value_functions.ipv4_matcher if kind == "4" else value_functions.ipv6_matcher)(str(subnet))
        return per_value(lambda v: int(matcher(v)), pa.int64(), nulls=False)(n, address)
    return apply


# the registry's implementations (core.expression.functions names them "network.<name>")
ipv4_match = _ip_match("4")


def ipv4_parse(n: int, a: Any) -> Any:
    return per_value(value_functions.ipv4_parse, pa.int64())(n, a)


def ipv4_stringify(n: int, a: Any) -> Any:
    return per_value(value_functions.ipv4_stringify, pa.string())(n, a)


ipv6_match = _ip_match("6")
