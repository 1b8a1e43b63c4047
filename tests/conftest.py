"""Test set-up: the example scripts importable, and hypothesis settings for CI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from tests.spawn import RENDEZVOUS_VARIABLES

# The fixtures that force the package's private paths (used by budget tests only).
pytest_plugins = ["tests.private_paths"]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

# Property tests time nothing: a first call into torch can take longer than hypothesis' default
# 200 ms deadline on a loaded CI machine, which would fail a correct test. The default profile
# is derandomised: every run (CI's included) draws the same examples, so a failure reproduces
# and a pass means the same thing twice; `HYPOTHESIS_PROFILE=explore` draws new ones (and keeps
# hypothesis' example database) to look for failures on purpose.
settings.register_profile("torch_ndcg", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "torch_ndcg"))


# User code for mypy (tests/test_typing.py), not for pytest: results_bad.py fails when run.
collect_ignore = ["typing"]

# Devices the parity tests run on. "cpu-without-read-back" is the CPU taking the paths of an
# accelerator (no value read back: branch-free ties, device-side checks), so that CI, which has
# no GPU, checks their numbers too; it forces a private path, so it is a budget item
# (tests/README.md). "cuda" runs where a GPU is present and skips elsewhere.
DEVICES = ["cpu", pytest.param("cpu-without-read-back", marks=pytest.mark.budget), "cuda"]


@pytest.fixture(autouse=True)
def fresh_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    """No rendezvous variables from an earlier test: each ``ddp_spawn`` run picks a free port.

    Lightning's ``ddp_spawn`` leaves ``MASTER_PORT`` in this process's environment, and a later
    ``Trainer`` would reuse it while the earlier run's sockets may still hold it.
    """
    for name in RENDEZVOUS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """A device for a parity test; skips ``"cuda"`` where CUDA is not available."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if request.param == "cpu-without-read-back":
        request.getfixturevalue("accelerator_paths")
        return torch.device("cpu")
    return torch.device(request.param)


# torch.compile of the losses' custom autograd Functions: correct gradients on torch 2.13 (this
# project's CI); on torch 2.11 (seen on an H100) the compiled losses failed parity with eager.
TORCH_VERSION = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
needs_torch_2_13_to_compile_losses = pytest.mark.skipif(
    TORCH_VERSION < (2, 13),
    reason="torch.compile of the losses is supported from torch 2.13 (2.11 fails parity)",
)
