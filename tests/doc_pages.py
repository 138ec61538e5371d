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


def recipe() -> dict:
    """docs/connections.md's recipe "Your own Kafka and PostgreSQL": the spec parts it gives (`spec.ioConfig.
    consumerProperties` and `microbatch.deepStorage`), as docker-compose.yaml and tests/system/test_secure_dag.py
    run them."""
    import yaml

    found = [doc for _, block in blocks("yaml", DOCS / "connections.md")
             if isinstance(doc := yaml.safe_load(block), dict) and set(doc) == {"spec", "microbatch"}]
    assert len(found) == 1, f"docs/connections.md has {len(found)} recipe blocks (spec: and microbatch:), not one"
    return found[0]


def with_recipe(raw: dict) -> dict:
    """A spec (its raw YAML) with the recipe's parts merged in: the recipe's consumerProperties replace the spec's,
    its deepStorage replaces the spec's."""
    import copy

    parts, raw = recipe(), copy.deepcopy(raw)
    raw["spec"]["ioConfig"]["consumerProperties"] = parts["spec"]["ioConfig"]["consumerProperties"]
    raw.setdefault("microbatch", {})["deepStorage"] = parts["microbatch"]["deepStorage"]
    return raw
