"""Kernel launches and memory of the hot paths on an accelerator's paths.

On a GPU these calls are bound by their launches (see ``benchmarks/bench_launches.py``, whose
counter this uses): the budgets are today's counts, so that a change that adds launches to a hot
path shows here and is made on purpose. For comparison, allRank 1.4.3 launches 105
(``lambdaLoss``, NDCG-Loss2++) and 70 (``approxNDCGLoss``) per step at both sizes below, and
holds at most 720.1 and 416.7 MiB at 16 x 1,024 (45.1 and 26.3 MiB at 64 x 128), counted the
same way (what ``torch.cuda.max_memory_allocated`` reports on a GPU: 417 MiB was measured for
``approxNDCGLoss`` on an H100). Ours must stay within a fifth of that at 16 x 1,024.

A ``budget`` module: launch counts of forced accelerator paths (tests/README.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_launches import LaunchCounter, accelerator_paths

from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    UnbiasedLambdaRankLoss,
    _pairwise,
    ndcg,
    simulate_clicks,
)

# Pins internals: see tests/README.md ("budget").
pytestmark = pytest.mark.budget


def launches(fn: object) -> LaunchCounter:
    assert callable(fn)
    with accelerator_paths():
        fn()  # caches filled
        with LaunchCounter() as counter:
            fn()
    return counter


def lists(n: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    preds = torch.randn(n, length, generator=generator)
    return preds, torch.randint(0, 5, (n, length), generator=generator)


@pytest.mark.parametrize("validate", [True, False])
def test_metric_update_and_functional_launch_budget(validate: bool) -> None:
    preds, target = lists(256, 100)
    metric = NDCG(k=10, validate_args=validate)
    update = launches(lambda: metric.update(preds, target)).launches
    functional = launches(lambda: ndcg(preds, target, k=10, validate_args=validate)).launches
    budget = 34 if validate else 24
    assert update <= budget
    assert functional <= budget


MIB = 2**20


@pytest.mark.parametrize(
    ("loss", "shape", "budget", "allrank_mib"),
    [
        (LambdaRankLoss(weighting="ndcg2pp", validate_args=False), (64, 128), 51, 45.1),
        (LambdaRankLoss(weighting="ndcg2pp", validate_args=False), (16, 1024), 67, 720.1),
        (ApproxNDCGLoss(validate_args=False), (64, 128), 45, 26.3),
        (ApproxNDCGLoss(validate_args=False), (16, 1024), 45, 416.7),
    ],
    ids=["lambdarank-64x128", "lambdarank-16x1024", "approx-64x128", "approx-16x1024"],
)
def test_loss_step_launch_budget_and_memory(
    loss: torch.nn.Module, shape: tuple[int, int], budget: int, allrank_mib: float
) -> None:
    preds, target = lists(*shape)
    leaf = preds.requires_grad_()
    counter = launches(lambda: loss(leaf, target.float()).backward())
    assert counter.launches <= budget
    # No [B, L, L] tensor beyond one block (16 x 1,024 has 2^24 pairs: one block of the smooth
    # ranks, two of the pair loss), one block's temporaries alive at a time.
    block = (
        _pairwise.ACCELERATOR_SINGLE_TEMPORARY_BLOCK_ELEMENTS
        if isinstance(loss, ApproxNDCGLoss)
        else _pairwise.ACCELERATOR_BLOCK_ELEMENTS
    )
    assert counter.largest_output <= block
    assert counter.peak_bytes < allrank_mib * MIB / (5 if shape[1] == 1024 else 2)


def test_debiased_lambdarank_step_within_a_fifth_of_a_plain_one() -> None:
    """A training step of `UnbiasedLambdaRankLoss` (biases updated) at 16 x 1,024 costs at most
    1.2x the launches of a plain `LambdaRankLoss` step on the same clicks (the mask of the shown
    items made inside the step), and about the same memory: its block holds the pair losses and
    slopes side by side (two blocks' elements) where the plain one keeps a third temporary."""
    generator = torch.Generator().manual_seed(0)
    batch, length = 16, 1024
    preds = torch.randn(batch, length, generator=generator).requires_grad_()
    positions = torch.stack([torch.randperm(length, generator=generator) for _ in range(batch)])
    labels = torch.randint(0, 5, (batch, length), generator=generator)
    clicks = simulate_clicks(labels, positions, generator=generator)
    plain = LambdaRankLoss(validate_args=False)
    unbiased = UnbiasedLambdaRankLoss(num_positions=length, validate_args=False)
    base = launches(lambda: plain(preds, clicks, positions >= 0).backward())
    debiased = launches(lambda: unbiased(preds, clicks, positions).backward())
    # 1.2x plus the one comparison that keeps a step that would overflow a sum out of it
    assert debiased.launches <= 1.2 * base.launches + 1
    # today's count (84 plain; 3 of them for the references R, 1 to count each click alike:
    # the statistics times each list's ideal DCG, 1 to keep overflowing sums out)
    assert debiased.launches <= 101
    assert debiased.largest_output <= 2 * _pairwise.ACCELERATOR_BLOCK_ELEMENTS
    assert debiased.peak_bytes <= 1.05 * base.peak_bytes
