"""`mypy --strict` on user code: results typed by construction, other libraries' names flagged."""

from __future__ import annotations

from pathlib import Path

from mypy import api as mypy_api

HERE = Path(__file__).parent / "typing"


def run_mypy(path: Path) -> tuple[str, int]:
    stdout, stderr, status = mypy_api.run(["--strict", "--no-error-summary", str(path)])
    return stdout + stderr, status


def test_typed_results_pass_strict_mypy() -> None:
    output, status = run_mypy(HERE / "results_ok.py")
    assert status == 0, output


def test_strict_mypy_reports_each_mistake() -> None:
    output, status = run_mypy(HERE / "results_bad.py")
    assert status == 1, output
    lines = [line for line in output.splitlines() if ": error:" in line]
    # Every statement after the line that makes the tensors is one mistake (a call that matches
    # no overload is reported twice on its line).
    source = (HERE / "results_bad.py").read_text("utf-8").splitlines()
    start = next(n for n, line in enumerate(source, 1) if line.startswith("p, t, i ="))
    mistakes = [n for n, line in enumerate(source, 1) if n > start and line[:1] not in ("", "#")]
    assert sorted({int(line.split(":")[1]) for line in lines}) == mistakes, output
    assert len(mistakes) == 18
