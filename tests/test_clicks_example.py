"""examples/train_from_clicks.py runs end to end in its tiny mode and prints its tables."""

from __future__ import annotations

from pathlib import Path

import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_train_from_clicks_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    import train_from_clicks

    plot = tmp_path / "biases.png"
    runs = train_from_clicks.main(["--tiny", "--plot", str(plot)])
    out = capsys.readouterr().out
    assert {"logger", "full", "naive", "ips", "learnt"} <= set(runs)
    for name in ("xgboost", "lightgbm"):  # both are in the examples extra
        assert name in runs
    assert all(0 <= values[0] <= 1 for values in runs.values())
    assert "| method | test nDCG@10 (mean ± sd) | gap closed |" in out
    assert "| position | true θ_i/θ_1 | learnt S+_i/S+_1 (mean ± sd) |" in out
    assert plot.read_bytes().startswith(PNG_MAGIC)
