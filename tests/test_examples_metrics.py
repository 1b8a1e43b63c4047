"""The metrics examples run and print what the README shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_lightning_validation_example_logs_the_whole_set_value() -> None:
    pytest.importorskip("lightning")
    out = subprocess.run(
        [sys.executable, "examples/lightning_validation.py", "--epochs", "1", "--no-progress-bar"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    epoch = next(line for line in out.splitlines() if line.startswith("epoch 0:"))
    exact = next(line for line in out.splitlines() if line.startswith("functional"))
    values = [float(v) for v in exact.split("[")[1].rstrip("]").split(",")]
    for name, value in zip(("ndcg@1", "ndcg@5", "ndcg@10"), values, strict=True):
        assert f"{name} {value:.4f}" in epoch
