"""Rules the test suite keeps about itself (tests/README.md says why).

Behaviour tests reach the package only through its public names, so that a re-partition of the
package cannot make them pass by patching a name the code no longer calls. What pins internals
(launch and Python-call budgets, patched private names, mocked internals, forced private paths)
carries the ``budget`` marker: ``pytest -m "not budget"`` runs the behaviour alone.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGES = ("torch_ndcg", "torch_ndcg.functional")
# A private module or name of the package named in a string: a monkeypatch target, or code run
# in a subprocess.
PRIVATE_IN_TEXT = re.compile(
    r"torch_ndcg(\.[a-z]+)*\._[a-z]|from torch_ndcg(\.[a-z]+)* import[^\n]*\b_[a-z]"
)
PUBLIC_MODULES = {"functional", "metrics", "losses"}
# Modules of tests/ that may name private parts of the package: the references never import the
# package at all; tests/private_paths.py holds every reach into its internals, and is imported only
# by budget tests (its fixtures are requested only by them); this file names them as examples.
EXEMPT = {"references.py", "private_paths.py", "test_suite_rules.py"}
# The fixtures of tests/private_paths.py: a test that requests one is a budget test.
PRIVATE_FIXTURES = {"accelerator_paths"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_budget_mark(node: ast.expr) -> bool:
    """``pytest.mark.budget`` (or the same called), as a decorator or in ``pytestmark``."""
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Attribute) and node.attr == "budget"


def _module_is_budget(tree: ast.Module) -> bool:
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark"
            for target in statement.targets
        ):
            value = statement.value
            marks = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            if any(_is_budget_mark(mark) for mark in marks):
                return True
    return False


class _PrivateNames(ast.NodeVisitor):
    """Collects the private references of a module outside its budget-marked tests."""

    def __init__(self) -> None:
        self.package_aliases: set[str] = set()
        self.found: list[tuple[int, str]] = []

    def _report(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    def _visit_scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        if any(_is_budget_mark(decorator) for decorator in node.decorator_list):
            return
        if not isinstance(node, ast.ClassDef):
            for argument in node.args.args + node.args.kwonlyargs:
                if argument.arg in PRIVATE_FIXTURES:
                    self._report(node, f"fixture {argument.arg}")
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)  # a bare string is a docstring: prose, not a reference

    visit_FunctionDef = _visit_scope
    visit_AsyncFunctionDef = _visit_scope
    visit_ClassDef = _visit_scope

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            if alias.name == "tests.private_paths":
                self._report(node, "import of tests.private_paths")
            elif parts[0] == "torch_ndcg":
                if any(_is_private(part) for part in parts):
                    self._report(node, f"import {alias.name}")
                else:
                    self.package_aliases.add(alias.asname or parts[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module == "tests.private_paths" or (
            module == "tests" and any(alias.name == "private_paths" for alias in node.names)
        ):
            self._report(node, "import of tests.private_paths")
            return
        if module.split(".")[0] != "torch_ndcg":
            return
        if any(_is_private(part) for part in module.split(".")):
            self._report(node, f"from {module} import ...")
            return
        for alias in node.names:
            if _is_private(alias.name):
                self._report(node, f"from {module} import {alias.name}")
            elif module == "torch_ndcg" and alias.name in PUBLIC_MODULES:
                self.package_aliases.add(alias.asname or alias.name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and base.id in self.package_aliases:
            chain = []
            current: ast.expr = node
            while isinstance(current, ast.Attribute):
                chain.append(current.attr)
                current = current.value
            if any(_is_private(part) for part in chain):
                self._report(node, f"{base.id}.{'.'.join(reversed(chain))}")
                return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        # patch.object(module, "_name"), monkeypatch.setattr(module, "_name", ...), getattr(...)
        arguments = node.args
        for first, second in itertools.pairwise(arguments):
            if (
                isinstance(first, ast.Name)
                and first.id in self.package_aliases
                and isinstance(second, ast.Constant)
                and isinstance(second.value, str)
                and _is_private(second.value)
            ):
                self._report(node, f"{first.id}.{second.value}")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and PRIVATE_IN_TEXT.search(node.value):
            self._report(node, f"string naming {PRIVATE_IN_TEXT.search(node.value)[0]!r}")


def private_references(path: Path) -> list[tuple[int, str]]:
    """The private names of the package that ``path`` reaches outside budget tests."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if _module_is_budget(tree):
        return []
    visitor = _PrivateNames()
    visitor.visit(tree)
    return visitor.found


def test_behaviour_tests_use_only_public_names() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line}: {what}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name not in EXEMPT
        for line, what in private_references(path)
    ]
    assert not offenders, "private names outside budget tests:\n" + "\n".join(offenders)


def test_the_rule_sees_each_kind_of_private_reference(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import pytest\n"
        "import torch_ndcg as tn\n"
        "from torch_ndcg import _host\n"
        "from torch_ndcg.functional._ndcg import ndcg\n"
        "def test_a(monkeypatch):\n"
        "    tn._tables.clear()\n"
        "    monkeypatch.setattr('torch_ndcg._host.may_read_back', None)\n"
        "@pytest.mark.budget\n"
        "def test_b():\n"
        "    from torch_ndcg import _dcg_paths\n"
        "def test_c(accelerator_paths):\n"
        "    'Not torch_ndcg._host: prose.'\n"
        "    tn.functional.ndcg\n"
        "    from tests import private_paths\n"
        "    from torch_ndcg import metrics as m\n"
        "    m._prepare_lists\n"
        "    monkeypatch.setattr(m, '_prepare_lists', None)\n"
    )
    assert [line for line, _ in private_references(sample)] == [3, 4, 6, 7, 11, 14, 16, 17]
    sample.write_text("import pytest\npytestmark = [pytest.mark.budget]\nimport torch_ndcg._x\n")
    assert private_references(sample) == []


def test_property_tests_draw_the_same_examples_on_every_run() -> None:
    """The default hypothesis profile is derandomised (tests/conftest.py)."""
    import os

    from hypothesis import settings

    if os.environ.get("HYPOTHESIS_PROFILE", "torch_ndcg") == "torch_ndcg":
        assert settings.default.derandomize
        assert settings.default.database is None
