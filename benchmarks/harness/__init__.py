"""What the benchmark scripts stand on, apart from the cases they run: benchmarks/fault_soak.py's soak (`soak`,
`dag_runs`, `soak_report`, `soak_constants`) and benchmarks/microbatch_fixed_cost.py's runs and their figures
(`fixed_cost_*`), benchmarks/history_retention.py's Airflow side (`airflow_history`). The scripts hold their
cases and their command lines; `make bench` runs the scripts."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the project's packages, as the scripts import them
    sys.path.insert(0, str(ROOT))
