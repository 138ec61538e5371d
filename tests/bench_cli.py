"""Running a script of benchmarks/ through its own command line, as `make bench` does, and reading its figures
(tests/system/test_benchmarks.py, tests/system/test_soak.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"(-?[\d,]*\d(?:\.\d+)?)"  # as the scripts print them: 1,234 or 0.48


def run_benchmark(script: str, *args: str, timeout: float) -> str:
    """`python benchmarks/<script> --tiny <args>`: its stdout, once it exited 0."""
    command = [sys.executable, str(ROOT / "benchmarks" / script), "--tiny", *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (f"{' '.join(command[1:])} exited {done.returncode}\nstdout: ...{done.stdout[-4000:]}"
                                  f"\nstderr: ...{done.stderr[-4000:]}")
    return done.stdout


def figures(out: str, lines: dict[str, str]) -> dict[str, list[float]]:
    """{name: the numbers of its line}: each pattern (a regular expression whose groups are numbers) must match a
    line of `out`."""
    found = {}
    for name, pattern in lines.items():
        match = re.search(pattern, out, re.MULTILINE)
        assert match, f"no {name} line (/{pattern}/) in the output:\n{out[-4000:]}"
        found[name] = [float(g.replace(",", "")) for g in match.groups()]
    return found


def assert_positive(got: dict[str, list[float]], *names: str) -> None:
    """Each number of the named figures (all figures without names) is above zero: a rate, a time, a ratio or a
    count that a run which did its work cannot print as 0 or less."""
    for name in names or tuple(got):
        assert all(v > 0 for v in got[name]), f"{name}: {got[name]} (each must be above 0)"
