"""The suite's generated data is reproducible: one commit draws the same Hypothesis examples whatever tests are
selected (a test file alone, the unit tests, the whole suite), so a failure found in CI fails again locally."""

from __future__ import annotations

import importlib
import sys
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st


def test_the_suites_profile_derandomizes_and_keeps_no_database():
    assert settings.default.derandomize and settings.default.database is None


def test_examples_do_not_depend_on_which_of_the_projects_modules_are_imported(tmp_path, monkeypatch):
    # Hypothesis also draws constants it finds in the project's imported modules: a module imported between two
    # runs (another test file's import, say) must not change what a derandomized test draws
    seen: list[int] = []

    @settings(max_examples=300, derandomize=True, database=None)
    @given(st.integers())
    def draw(n):
        seen.append(n)

    draw()
    first, seen[:] = list(seen), []
    name = f"fresh_constants_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("A, B, C = 31337, 271828182, -4242424242\nS = 'a constant of its own'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module(name)
        draw()
    finally:
        sys.modules.pop(name, None)
    assert seen == first
