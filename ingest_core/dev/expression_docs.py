"""docs/expressions.md's function reference, printed from the registry (`ingest_core.core.expression.functions`):
one table per section of Druid's math-expr.md, each function's call, the arguments that must be constants, and
Druid's documented examples with their values. `python -m ingest_core.dev.expression_docs` rewrites it in place;
tests/unit/test_docs_site.py fails when the page and the registry differ."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from ingest_core.core.expression.function import Function
from ingest_core.core.expression.functions import REFUSED, SECTIONS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "expressions.md"
BEGIN = "<!-- function reference: generated from the registry by `python -m ingest_core.dev.expression_docs` -->"
END = "<!-- end of the function reference -->"


def _value(v: Any) -> str:
    """An example's value as the expression language writes it."""
    if v is None:
        return "null"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return repr(v)


def _cell(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def _row(fn: Function) -> str:
    constants = ", ".join(p.name for p in (*fn.params, *([fn.variadic] if fn.variadic else ())) if p.constant)
    examples = "<br>".join(f"{_cell(e.text)} → {_cell(_value(e.result))}" for e in fn.examples)
    return f"| {_cell(fn.synopsis())} | {constants} | {examples} |"


def render() -> str:
    """The reference, between its markers."""
    out = [BEGIN, ""]
    for section in SECTIONS:
        out += [f"### {section.TITLE}", "", "| Function | Constant arguments | Druid's documented examples |",
                "| --- | --- | --- |"]
        out += [_row(fn) for fn in section.FUNCTIONS]
        out.append("")
    out += ["Refused by name, with what to do instead: " + "; ".join(f"`{name}` ({why})" for name, why in
                                                                     REFUSED.items()) + ".", "", END]
    return "\n".join(out)


def current(page: str) -> str | None:
    """The reference as `page` holds it (None when it has none)."""
    start, end = page.find(BEGIN), page.find(END)
    return page[start:end + len(END)] if 0 <= start < end else None


def main() -> int:
    page = PAGE.read_text()
    old = current(page)
    if old is None:
        print(f"{PAGE} has no function reference between {BEGIN!r} and {END!r}; add the two lines where it goes",
              file=sys.stderr)
        return 2
    PAGE.write_text(page.replace(old, render()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
