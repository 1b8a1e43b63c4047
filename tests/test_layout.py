"""The package's import directions (shared/DESIGN.md, "Data flows one way"), read from its source.

Layers: the leaves (options, host helpers, table cache), the checks (`_validation`), the engine
(every other private top-level module), `functional/`, and on top the metrics and losses. The
checks import no engine module, the engine imports no checks and nothing above it, and the
metrics and losses reach the engine only through `functional/`. `KNOWN_VIOLATIONS` lists the
imports that break a rule today: the one-engine re-partition (issue 26) empties it. The test
fails on a new violation, and on a listed one that is gone (so the list only shrinks).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.budget  # it pins how the package is laid out, not what it does

PACKAGE = Path(__file__).resolve().parents[1] / "torch_ndcg"
LEAVES = {"_options", "_host", "_tables"}
CHECKS = {"_validation"}
TOP = {"metrics", "losses", "_metric_base", "_metric_sync", "__init__"}

KNOWN_VIOLATIONS: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE).with_suffix("")
    return ".".join(relative.parts)


def layer(name: str) -> str:
    if name.startswith("functional"):
        return "functional"
    if name in LEAVES:
        return "leaf"
    if name in CHECKS:
        return "checks"
    if name in TOP:
        return "top"
    return "engine"


def imported_modules(path: Path) -> set[str]:
    """The package modules a file imports (`from torch_ndcg import x`, `torch_ndcg.x.y`)."""
    found: set[str] = set()
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "torch_ndcg":
                continue
            base = ".".join(parts[1:])
            for alias in node.names:
                candidate = f"{base}.{alias.name}" if base else alias.name
                if candidate in known or f"{candidate}.__init__" in known:
                    found.add(candidate)
                elif base:
                    found.add(base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("torch_ndcg."):
                    found.add(alias.name.split(".", 1)[1])
    return {name.removesuffix(".__init__") for name in found}


def breaks_a_rule(importer: str, imported: str) -> bool:
    source, target = layer(importer), layer(imported)
    if source == "checks":
        return target in {"engine", "functional", "top"}
    if source == "engine":
        return target in {"checks", "functional", "top"}
    if source == "top" and importer != "__init__":
        return target == "engine"
    if source == "leaf":
        return target != "leaf"
    return source == "functional" and target == "top"


def violations() -> set[tuple[str, str]]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        importer = module_name(path).removesuffix(".__init__")
        for imported in imported_modules(path):
            if imported != importer and breaks_a_rule(importer, imported):
                found.add((importer, imported))
    return found


def test_imports_flow_one_way_but_for_the_known_violations() -> None:
    found = violations()
    assert found - KNOWN_VIOLATIONS == set(), "new imports against the layout"
    assert KNOWN_VIOLATIONS - found == set(), "gone: remove them from KNOWN_VIOLATIONS"


def test_the_rules_tell_a_violation_apart() -> None:
    assert breaks_a_rule("_validation", "_dcg_paths")
    assert breaks_a_rule("_dcg_paths", "_validation")
    assert breaks_a_rule("losses", "_pairwise")
    assert not breaks_a_rule("losses", "functional._pairwise_losses")
    assert not breaks_a_rule("functional._ndcg", "_dcg_paths")
    assert not breaks_a_rule("_dcg_paths", "_options")
