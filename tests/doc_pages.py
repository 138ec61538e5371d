"""The project's documentation as the tests read it: README.md and the pages of the docs site (docs/*.md), and
the code blocks they hold, so each snippet is checked wherever it lives."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """README first, then the docs pages in name order (a stable order for snippets that run one after another)."""
    return [README, *sorted(DOCS.glob("*.md"))]


def blocks(language: str, *paths: Path) -> list[tuple[Path, str]]:
    """Every fenced block of `language` (```python, ```yaml, ...) in `paths` (default: every page), with its page."""
    found = []
    for path in paths or pages():
        text = path.read_text()
        found += [(path, body) for body in re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)]
    return found
