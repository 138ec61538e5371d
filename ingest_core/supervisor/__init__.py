"""The supervisor loop's steps with their I/O: planning one run (offsets from the store and the broker, a pure
plan from `ingest_core.core.planner`, persisted) and the supervisor's states (Druid's vocabulary)."""
