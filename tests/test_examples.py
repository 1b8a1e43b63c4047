"""The examples run, and the data set they use matches its README."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from ranking_data import load_split

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    assert "Järvelin DCG@6 = 8.10" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "queries", "rows", "longest"), [("train", 201, 3005, 27), ("test", 50, 768, 24)]
)
def test_ranking_data_shapes(name: str, queries: int, rows: int, longest: int) -> None:
    split = load_split(name)
    assert split.features.shape == (rows, 300)
    assert len(split.query_sizes) == queries
    features, labels, mask = split.padded()
    assert features.shape == (queries, longest, 300)
    assert int(mask.sum()) == rows
    assert labels[mask].tolist() == split.labels.tolist()
