"""The documentation site builds without a warning, and its doctest examples give what they show."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# ```python blocks whose first line is a prompt (also indented, inside an admonition): the
# examples a reader can paste and check.
DOCTEST_BLOCK = re.compile(r"^( *)```python\n(\1>>> .*?)^\1```", re.MULTILINE | re.DOTALL)
OPTIONFLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def doc_pages_with_doctests() -> list[Path]:
    return sorted(
        page for page in DOCS.rglob("*.md") if DOCTEST_BLOCK.search(page.read_text("utf-8"))
    )


def test_mkdocs_build_is_strict_clean(tmp_path: Path) -> None:
    # mkdocs, mkdocs-material and mkdocstrings are in the test extra: missing tools fail here.
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    print(output)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "api" / "index.html").is_file()
    # Formulas are MathML written at build time: the pages load no script from elsewhere.
    api = (tmp_path / "api" / "index.html").read_text("utf-8")
    assert api.count("<math") > 20
    assert "arithmatex" not in api
    for page in tmp_path.rglob("*.html"):
        text = page.read_text("utf-8")
        assert not re.search(r"<script[^>]*mathjax|window\.MathJax", text, re.IGNORECASE), page
        assert not re.search(r"<script[^>]+src=\"https?://", text), page
    assert not (tmp_path / "hooks").exists()
    # One clean signature per class: no overloads, no `**ported_names: NoReturn` catch-all.
    assert "ported_names" not in api
    assert "NoReturn" not in api
    assert "= ..." not in api.replace("<span", "").replace("</span>", "")
    signatures = re.findall(r'<div class="doc-signature[^"]*">.*?</div>', api, re.DOTALL)
    names = [re.sub(r"<[^>]+>", "", s).split("(")[0].split()[-1] for s in signatures]
    for name in ("NDCG", "RetrievalNDCG", "LambdaRankLoss", "ndcg"):
        assert names.count(name) == 1, (name, names)


def test_docs_have_doctest_examples() -> None:
    assert len(doc_pages_with_doctests()) >= 8


@pytest.mark.parametrize(
    "page", doc_pages_with_doctests(), ids=lambda page: str(page.relative_to(DOCS))
)
def test_doc_examples(page: Path) -> None:
    """Every ``>>>`` block of a page, in order, in one namespace (as a reader runs them)."""
    text = page.read_text("utf-8")
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    failures: list[str] = []
    namespace: dict[str, object] = {}
    for block in DOCTEST_BLOCK.finditer(text):
        line = text.count("\n", 0, block.start(2))
        name = str(page.relative_to(ROOT))
        source = textwrap.dedent(block.group(2))
        test = parser.get_doctest(source, namespace, name, str(page), line)
        runner.run(test, out=failures.append, clear_globs=False)
        namespace = test.globs
    assert runner.failures == 0, "".join(failures)
    assert runner.tries > 0


def command_after_marker(page: Path, marker: str) -> str:
    """The first fenced block after the line ``<!-- marker -->``, as `.ci/run` reads it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- {marker} -->") + 1
    fence = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[fence + 1 : end]).strip()


@pytest.mark.parametrize("marker", ["main-command", "test-command"])
def test_docs_home_repeats_the_readme_commands(marker: str) -> None:
    """The docs' home page shows the two set-up commands CI runs from the README, unchanged."""
    readme = command_after_marker(ROOT / "README.md", marker)
    assert readme, f"README.md has an empty {marker} block"
    assert command_after_marker(DOCS / "index.md", marker) == readme
