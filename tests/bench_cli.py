"""Running a script of benchmarks/ through its own command line, as `make bench` does, and reading its figures
(tests/system/test_benchmarks.py, tests/system/test_soak.py)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"(-?[\d,]*\d(?:\.\d+)?)"  # as the scripts print them: 1,234 or 0.48


class Benchmark:
    """`python benchmarks/<script> --tiny <args>`, started (`start_benchmark`): `output` waits for it."""

    def __init__(self, script: str, args: tuple[str, ...], timeout: float):
        self.command = [sys.executable, str(ROOT / "benchmarks" / script), "--tiny", *args]
        self.deadline = time.monotonic() + timeout
        # files, not pipes: nobody reads a pipe while the script runs in the background
        self.stdout, self.stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(self.command, cwd=ROOT, stdout=self.stdout, stderr=self.stderr, text=True)

    def output(self) -> str:
        """Its stdout, once it exited 0 (stopped at its deadline)."""
        ended = "exited"
        try:
            self.proc.wait(max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            ended = "was stopped at its deadline and exited"
        out, err = self._read(self.stdout), self._read(self.stderr)
        assert self.proc.returncode == 0, (f"{' '.join(self.command[1:])} {ended} {self.proc.returncode}\nstdout: "
                                           f"...{out[-4000:]}\nstderr: ...{err[-4000:]}")
        return out

    @staticmethod
    def _read(file) -> str:
        with file:
            file.seek(0)
            return file.read()

    def stop(self) -> None:
        """Interrupted (its cleanup stops the services it started), killed if that takes over a minute."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def start_benchmark(script: str, *args: str, timeout: float) -> Benchmark:
    """The script started at its tiny size, in the background: `output()` waits for its stdout."""
    return Benchmark(script, args, timeout)


def run_benchmark(script: str, *args: str, timeout: float) -> str:
    """`python benchmarks/<script> --tiny <args>`: its stdout, once it exited 0."""
    return start_benchmark(script, *args, timeout=timeout).output()


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
