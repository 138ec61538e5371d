"""The DataSketches aggregators: thetaSketch, HLLSketchBuild / HLLSketchMerge (and hyperUnique, cardinality, stored
as HLL sketches), quantilesDoublesSketch, KllDoublesSketch / KllFloatsSketch.

Each is stored as Apache DataSketches' standard serialized bytes (what Druid's Java library writes). A split
builds one sketch per group (`executor.sketches.build`, vectorized there); Spark collects a group's partial
sketches and `union`s them here (in a mapInArrow), as compaction does. The `datasketches` package is imported
when a sketch is first made: parsing a spec needs none of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingest_core.core.aggregators.base import AggregatorType, Evaluator, SerializedInput, base64_bytes
from ingest_core.core.binding import BindContext, check_range, did_you_mean, join

# Druid's defaults and ranges (the DataSketches libraries' own limits)
THETA_DEFAULT_SIZE = 16384
THETA_MIN_SIZE, THETA_MAX_SIZE = 16, 1 << 26
HLL_DEFAULT_LG_K, HLL_MIN_LG_K, HLL_MAX_LG_K = 12, 4, 21
HLL_TYPES = ("HLL_4", "HLL_6", "HLL_8")
HLL_DEFAULT_TYPE = "HLL_4"
HLL_STRING_ENCODINGS = ("utf16le", "utf8")  # Druid's default: utf16le (a string hashed as Java's char[])
QUANTILES_DEFAULT_K, QUANTILES_MIN_K, QUANTILES_MAX_K = 128, 2, 32768
KLL_DEFAULT_K, KLL_MIN_K, KLL_MAX_K = 200, 8, 65535
HYPER_UNIQUE_LG_K = 11  # Druid's hyperUnique has 2^11 registers: the HLL sketch it becomes keeps that accuracy


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _ds() -> Any:
    import datasketches

    return datasketches


@dataclass(frozen=True)
class SketchParams:
    """How one sketch metric is built. `lg_k`: theta's log2(size), HLL's lgK; `k`: quantiles and KLL;
    `from_sketches`: the input values are serialized sketches (base64 text, as Druid takes them) to merge."""

    op: str  # theta, hll, quantiles, kll: the family (`family`)
    lg_k: int = 0
    tgt_hll_type: str = "HLL_4"
    k: int = 0
    floats: bool = False  # KllFloatsSketch
    from_sketches: bool = False
    utf16le: bool = False  # HLL: strings hashed as UTF-16LE (Druid's default stringEncoding)

    @property
    def family(self) -> "SketchType":
        return _FAMILIES[self.op]

    def new(self) -> Any:
        """An empty updatable sketch."""
        return self.family.new(self)

    def finish(self, sketch: Any) -> bytes:
        return self.family.finish(self, sketch)

    def deserialize(self, data: bytes) -> Any:
        """A sketch from its serialized bytes; ValueError (or RuntimeError from the library) when they are not one."""
        return self.family.deserialize(self, data)

    def union(self, parts: list[bytes]) -> bytes:
        """The union (merge) of serialized sketches (at least one), serialized."""
        return self.family.union(self, parts)

    @property
    def description(self) -> str:
        return self.family.description(self)


class SketchType(AggregatorType):
    builds_in_python = True  # merged by `union` in Spark; built vectorized by `executor.sketches`
    family = ""

    def stored_type(self, agg: Any) -> str:
        return "binary"

    def serialized_input(self, agg: Any) -> SerializedInput | None:
        p = self.sketch(agg)
        return SerializedInput("a sketch", lambda text: input_sketch_bytes(p, text)) if p.from_sketches else None

    def combine(self, agg: Any, parts: list[Any], evaluate: Evaluator) -> Any:
        p, kept = self.sketch(agg), [part for part in parts if part is not None]
        return p.union(kept) if kept else p.finish(p.new())

    # the family's library calls, for `SketchParams`
    def new(self, p: SketchParams) -> Any:
        raise NotImplementedError

    def finish(self, p: SketchParams, sketch: Any) -> bytes:
        return sketch.serialize()

    def deserialize(self, p: SketchParams, data: bytes) -> Any:
        raise NotImplementedError

    def union(self, p: SketchParams, parts: list[bytes]) -> bytes:
        merged = self.new(p)
        for part in parts:
            merged.merge(self.deserialize(p, part))
        return merged.serialize()

    def description(self, p: SketchParams) -> str:
        return self.family


class HashedSketch(SketchType):
    """A sketch of hashed values (theta, HLL), as opposed to one of numbers (quantiles, KLL)."""


class ThetaSketch(HashedSketch):
    op = family = "theta"
    own_fields = frozenset({"size", "isInputThetaSketch", "shouldFinalize", "errorBoundsStdDev"})

    def hashes_typed_values(self, agg: Any) -> bool:
        return not agg.is_input_theta_sketch

    def sketch(self, agg: Any) -> SketchParams:
        size = agg.size or THETA_DEFAULT_SIZE
        return SketchParams("theta", lg_k=size.bit_length() - 1, from_sketches=agg.is_input_theta_sketch)

    def check(self, agg: Any, path: str, ctx: BindContext) -> None:
        super().check(agg, path, ctx)
        if agg.size is not None and (not is_power_of_two(agg.size) or
                                     not THETA_MIN_SIZE <= agg.size <= THETA_MAX_SIZE):
            ctx.error(join(path, "size"), f"size must be a power of 2 from {THETA_MIN_SIZE} to "
                      f"{THETA_MAX_SIZE}, got {agg.size} (Druid's default: {THETA_DEFAULT_SIZE})")

    def new(self, p: SketchParams) -> Any:
        return _ds().update_theta_sketch(p.lg_k)

    def finish(self, p: SketchParams, sketch: Any) -> bytes:
        ds = _ds()
        if isinstance(sketch, ds.update_theta_sketch) and sketch.is_estimation_mode():
            # trimmed to the nominal size as Druid's union stores it (an update sketch keeps up to twice that)
            union = ds.theta_union(p.lg_k)
            union.update(sketch)
            return union.get_result().serialize()
        return sketch.compact().serialize() if isinstance(sketch, ds.update_theta_sketch) else sketch.serialize()

    def deserialize(self, p: SketchParams, data: bytes) -> Any:
        return _ds().compact_theta_sketch.deserialize(data)

    def union(self, p: SketchParams, parts: list[bytes]) -> bytes:
        union = _ds().theta_union(p.lg_k)
        for part in parts:
            union.update(self.deserialize(p, part))
        return union.get_result().serialize()


class HllSketch(HashedSketch):
    """HLLSketchBuild, HLLSketchMerge; hyperUnique and cardinality (lgK 11, their fields' values hashed)."""

    op = family = "hll"

    def own(self) -> frozenset[str]:
        return {"HLLSketchBuild": frozenset({"lgK", "tgtHllType", "round", "shouldFinalize", "stringEncoding"}),
                "HLLSketchMerge": frozenset({"lgK", "tgtHllType", "round", "shouldFinalize"}),
                "hyperUnique": frozenset({"isInputHyperUnique", "round"}),
                "cardinality": frozenset({"fields", "byRow", "round"})}[self.name]

    @property
    def needs_field_name(self) -> bool:  # type: ignore[override]
        return self.name != "cardinality"

    def hashes_typed_values(self, agg: Any) -> bool:
        return self.name in ("HLLSketchBuild", "hyperUnique")

    def input_fields(self, agg: Any) -> list[str]:
        if self.name == "cardinality":  # names or dimension specs
            return [f if isinstance(f, str) else f.get("dimension") if isinstance(f, dict) else None
                    for f in agg.fields or []]
        return super().input_fields(agg)

    def sketch(self, agg: Any) -> SketchParams:
        unique = self.name in ("hyperUnique", "cardinality")
        return SketchParams("hll", lg_k=HYPER_UNIQUE_LG_K if unique else agg.lg_k or HLL_DEFAULT_LG_K,
                            tgt_hll_type=agg.tgt_hll_type or HLL_DEFAULT_TYPE, from_sketches=self.name == "HLLSketchMerge",
                            utf16le=(agg.string_encoding or "utf16le") == "utf16le")

    def check(self, agg: Any, path: str, ctx: BindContext) -> None:
        super().check(agg, path, ctx)
        if self.name == "cardinality" and (not self.input_fields(agg) or
                                           not all(isinstance(f, str) and f for f in self.input_fields(agg))):
            ctx.error(join(path, "fields"), f"aggregator {agg.name!r}: cardinality needs `fields`, the "
                      "dimension names to count distinct values of, e.g. ['user']")
        check_range(ctx, join(path, "lgK"), agg.lg_k, minimum=HLL_MIN_LG_K, maximum=HLL_MAX_LG_K)
        if agg.tgt_hll_type is not None and agg.tgt_hll_type not in HLL_TYPES:
            ctx.error(join(path, "tgtHllType"), f"unknown tgtHllType {agg.tgt_hll_type!r}"
                      f"{did_you_mean(agg.tgt_hll_type, HLL_TYPES)}; use one of {', '.join(HLL_TYPES)}")
        if agg.string_encoding is not None and agg.string_encoding not in HLL_STRING_ENCODINGS:
            ctx.error(join(path, "stringEncoding"), f"unknown stringEncoding {agg.string_encoding!r}; use "
                      "utf16le (Druid's default) or utf8")
        if agg.is_input_hyper_unique:
            ctx.error(join(path, "isInputHyperUnique"), "Druid's own hyperUnique bytes cannot be read here: send "
                      "DataSketches HLL sketches (base64) to an HLLSketchMerge aggregator instead")

    def new(self, p: SketchParams) -> Any:
        ds = _ds()
        return ds.hll_sketch(p.lg_k, getattr(ds.tgt_hll_type, p.tgt_hll_type))

    def finish(self, p: SketchParams, sketch: Any) -> bytes:
        return sketch.serialize_compact()

    def deserialize(self, p: SketchParams, data: bytes) -> Any:
        return _ds().hll_sketch.deserialize(data)

    def union(self, p: SketchParams, parts: list[bytes]) -> bytes:
        ds = _ds()
        union = ds.hll_union(p.lg_k)
        for part in parts:
            union.update(self.deserialize(p, part))
        return union.get_result(getattr(ds.tgt_hll_type, p.tgt_hll_type)).serialize_compact()

    def description(self, p: SketchParams) -> str:
        return "HLL"


class QuantilesSketch(SketchType):
    op = family = "quantiles"
    own_fields = frozenset({"k", "maxStreamLength", "shouldFinalize"})

    def sketch(self, agg: Any) -> SketchParams:
        return SketchParams("quantiles", k=agg.k or QUANTILES_DEFAULT_K)

    def check(self, agg: Any, path: str, ctx: BindContext) -> None:
        super().check(agg, path, ctx)
        if agg.k is not None and (not is_power_of_two(agg.k) or not QUANTILES_MIN_K <= agg.k <= QUANTILES_MAX_K):
            ctx.error(join(path, "k"), f"k must be a power of 2 from {QUANTILES_MIN_K} to "
                      f"{QUANTILES_MAX_K}, got {agg.k} (Druid's default: {QUANTILES_DEFAULT_K})")

    def new(self, p: SketchParams) -> Any:
        return _ds().quantiles_doubles_sketch(p.k)

    def deserialize(self, p: SketchParams, data: bytes) -> Any:
        return _ds().quantiles_doubles_sketch.deserialize(data)

    def description(self, p: SketchParams) -> str:
        return "quantiles doubles"


class KllSketch(SketchType):
    op = family = "kll"
    own_fields = frozenset({"k", "maxStreamLength", "shouldFinalize"})

    def sketch(self, agg: Any) -> SketchParams:
        return SketchParams("kll", k=agg.k or KLL_DEFAULT_K, floats=self.name == "KllFloatsSketch")

    def check(self, agg: Any, path: str, ctx: BindContext) -> None:
        super().check(agg, path, ctx)
        check_range(ctx, join(path, "k"), agg.k, minimum=KLL_MIN_K, maximum=KLL_MAX_K)

    def _cls(self, p: SketchParams) -> Any:
        return _ds().kll_floats_sketch if p.floats else _ds().kll_doubles_sketch

    def new(self, p: SketchParams) -> Any:
        return self._cls(p)(p.k)

    def deserialize(self, p: SketchParams, data: bytes) -> Any:
        return self._cls(p).deserialize(data)

    def description(self, p: SketchParams) -> str:
        return "KLL floats" if p.floats else "KLL doubles"


_FAMILIES: dict[str, SketchType] = {t.family: t("", None) for t in (ThetaSketch, HllSketch, QuantilesSketch,
                                                                     KllSketch)}


def input_sketch_bytes(params: SketchParams, text: str) -> bytes:
    """A sketch sent as input (isInputThetaSketch, HLLSketchMerge): base64 text, as Druid takes it. Raises
    ValueError saying what is wrong."""
    data = base64_bytes(text, "a serialized DataSketches sketch")
    try:
        params.deserialize(data)
    except Exception as exc:  # noqa: BLE001 - the library raises ValueError or RuntimeError
        raise ValueError(f"not a serialized DataSketches {params.description} sketch ({exc})") from None
    return data
