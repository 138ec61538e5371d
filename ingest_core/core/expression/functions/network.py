"""Druid's ip address functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression import checks
from ingest_core.core.expression.function import MATH_EXPR, STRING, Example, Function, Param

TITLE = "IP address functions"
FUNCTIONS = (
    Function("ipv4_match", (Param("address"), Param("subnet", STRING, True)), check=checks.subnet,
             implementation="network.ipv4_match",
             examples=(Example("ipv4_match('192.168.0.1', '192.168.0.0/16')", 1, MATH_EXPR),
                       Example("ipv4_match(3232235521, '192.168.0.0/16')", 1, MATH_EXPR),)),
    Function("ipv4_parse", (Param("address"),), implementation="network.ipv4_parse",
             examples=(Example("ipv4_parse('192.168.0.1')", 3232235521, MATH_EXPR),
                       Example("ipv4_parse(3232235521)", 3232235521, MATH_EXPR))),
    Function("ipv4_stringify", (Param("address"),), implementation="network.ipv4_stringify",
             examples=(Example("ipv4_stringify(3232235521)", "192.168.0.1", MATH_EXPR),
                       Example("ipv4_stringify('192.168.0.1')", "192.168.0.1", MATH_EXPR))),
    Function("ipv6_match", (Param("address", STRING), Param("subnet", STRING, True)), check=checks.subnet,
             implementation="network.ipv6_match",
             examples=(Example("ipv6_match('75e9:efa4:29c6:85f6::232c', '75e9:efa4:29c6:85f6::/64')", 1, MATH_EXPR),)),
)
