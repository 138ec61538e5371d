"""The old import path of `ingest_core.provider.triggers.new_records`, kept because code and Airflow's database name it:
this module *is* that one (the same objects, so isinstance checks and patches agree)."""

import sys

import ingest_core.provider.triggers.new_records as _module

sys.modules[__name__] = _module
