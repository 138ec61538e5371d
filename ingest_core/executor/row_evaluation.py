"""An expression or a filter evaluated over a chunk's rows such that one row's fault fails that row only, and
each row gets the value it would get among rows of its own kind."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ingest_core.executor.expr_values import expression_input
from ingest_core.executor.row_values import concat_pieces, plain_array, py_value, type_groups


def per_row(evaluate: Callable[[dict[str, pa.Array], int], pa.Array], columns: dict[str, pa.Array],
            n: int, bad: dict[int, str], source: str, offsets: pa.Array, what: str,
            inputs: Any, raw_values: dict[str, list[Any]], nested: bool = False) -> pa.Array:
    """`evaluate(columns, n)` over the chunk, vectorized, such that each row gets the value it gets in a
    chunk of its own kind, whatever its neighbours:
    - an input column that mixes types in the chunk (text for the whole chunk) is evaluated per group of
      rows whose values have one type, each typed from its values (a number stays a number, and is not
      read as text because another record sent text there); with `nested` (transforms), a list is an
      array and an object a JSON value, as Druid's ExpressionTransform reads them, else they are text;
    - when an evaluation raises, its rows are halved and evaluated again until the rows at fault are found
      (a few evaluations per bad row); those rows are null and unparseable in `bad`, named by `source`
      (topic/partition) and their offsets."""
    mixed = sorted(set(inputs or ()) & raw_values.keys())
    if not mixed:
        try:
            return evaluate(columns, n)
        except Exception:  # noqa: BLE001 - any error of an expression fails its rows, not the job
            pass
    pieces: list[pa.Array] = []
    order: list[np.ndarray] = []

    def walk(rows: np.ndarray, part: dict[str, pa.Array]) -> None:
        for c in mixed:
            values = [raw_values[c][r] for r in rows]
            typed = plain_array(values)
            if typed is None and nested:
                typed = expression_input(values)
            if typed is not None:
                part[c] = typed
        try:
            pieces.append(evaluate(part, len(rows)))
            order.append(rows)
            return
        except Exception as exc:  # noqa: BLE001 - see above
            if len(rows) == 1:
                row = int(rows[0])
                given = {c: py_value(part[c][0]) for c in sorted(inputs or ()) if c in part}
                bad.setdefault(row, f"{what} failed at {source} offset "
                                    f"{offsets[row].as_py()} on {given}: {type(exc).__name__}: {exc}")
                pieces.append(pa.nulls(1))
                order.append(rows)
                return
        mid = len(rows) // 2
        walk(rows[:mid], {k: v.slice(0, mid) for k, v in part.items()})
        walk(rows[mid:], {k: v.slice(mid) for k, v in part.items()})

    groups = type_groups([raw_values[c] for c in mixed], n) if mixed else [np.arange(n)]
    for rows in groups:
        walk(rows, dict(columns) if len(groups) == 1 else
             {k: v.take(pa.array(rows)) for k, v in columns.items()})
    result = concat_pieces(pieces)
    if len(groups) == 1:
        return result  # the halves came back in row order
    inverse = np.empty(n, dtype=np.int64)
    inverse[np.concatenate(order)] = np.arange(n)
    return result.take(pa.array(inverse))
