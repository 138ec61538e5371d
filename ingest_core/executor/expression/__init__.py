"""The expression language's evaluator on the executors (it may use pyarrow): `evaluator` compiles a checked tree
(`ingest_core.core.expression`) to vectorized code; each other module implements one group of the registry's
functions (`general`, `text`, `numeric`, `times`, `network`, `arrays`, `apply`, `json_functions`) over the value
rules of `vectors` and `operators`, and `calendar`'s date arithmetic."""
