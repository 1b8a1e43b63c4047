"""LambdaRankLoss / ApproxNDCGLoss: gradients, blockwise = dense, limits, numerics, errors."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_ndcg
from tests import references as ref
from tests.conftest import needs_torch_2_13_to_compile_losses
from torch_ndcg import (
    ApproxNDCGLoss,
    LambdaRankLoss,
    approx_ndcg_loss,
    lambdarank_loss,
    ndcg,
    neural_ndcg_loss,
)

WEIGHTINGS = ["lambdarank", "ndcg2", "ndcg2pp"]
LossFn = Callable[..., torch.Tensor]
BOTH: list[LossFn] = [lambdarank_loss, approx_ndcg_loss]


def batch(
    n: int = 3, length: int = 9, *, seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tie-free scores, graded labels, a mask with padding at the end of some lists."""
    generator = torch.Generator().manual_seed(seed)
    preds = torch.randn(n, length, generator=generator, dtype=dtype)
    target = torch.randint(0, 4, (n, length), generator=generator)
    lengths = torch.randint(1, length + 1, (n,), generator=generator)
    lengths[0] = length
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return preds, target, mask


# --- LambdaRankLoss against independent references ---------------------------------------------


@pytest.mark.parametrize("weighting", WEIGHTINGS)
@pytest.mark.parametrize("k", [None, 1, 3])
def test_lambdarank_gradient_equals_burges_lambdas(
    weighting: str, k: int | None, device: torch.device
) -> None:
    preds, target, mask = batch(4, 8, seed=1)
    preds[1, :4] = 0.5  # tied scores: ranked in order of appearance on both sides
    on_device = preds.clone().to(device).requires_grad_()
    loss = lambdarank_loss(
        on_device, target.to(device), k=k, weighting=weighting, sigma=1.5, mask=mask.to(device)
    )
    loss.backward()
    expected_loss, expected_grad = ref.burges_lambdas(
        preds, target, mask, k=k, sigma=1.5, weighting=weighting
    )
    assert loss.item() == pytest.approx(expected_loss, rel=1e-10)
    assert on_device.grad is not None
    torch.testing.assert_close(
        on_device.grad.cpu(), torch.tensor(expected_grad, dtype=torch.float64)
    )


@pytest.mark.usefixtures("pair_path", "pair_table")  # tests/private_paths.py
@pytest.mark.parametrize("weighting", WEIGHTINGS)
@pytest.mark.parametrize(("k", "reduction"), [(None, "mean"), (2, "sum"), (4, "none")])
def test_lambdarank_blockwise_equals_dense(weighting: str, k: int | None, reduction: str) -> None:
    preds, target, mask = batch(3, 11, seed=2)
    ours = preds.clone().requires_grad_()
    dense = preds.clone().requires_grad_()
    got = lambdarank_loss(
        ours, target, k=k, weighting=weighting, mu=3.0, reduction=reduction, mask=mask
    )
    want = ref.lambdaloss_dense(
        dense, target, mask, k=k, weighting=weighting, mu=3.0, reduction=reduction
    )
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(ours.grad, dense.grad)


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_lambdarank_gradcheck(weighting: str) -> None:
    preds, target, mask = batch(2, 6, seed=3)
    preds.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda p: lambdarank_loss(p, target, k=4, weighting=weighting, mask=mask, reduction="none"),
        (preds,),
    )


def test_lambdarank_weights_carry_no_gradient_and_follow_current_ranks() -> None:
    # Swapping the scores of two items changes their ranks, hence the weights: loss values at
    # mirrored scores differ only through the logistic term, never through a weight gradient.
    preds = torch.tensor([0.3, 0.1, 0.2], dtype=torch.float64, requires_grad=True)
    target = torch.tensor([2, 0, 1])
    loss = lambdarank_loss(preds, target)
    (grad,) = torch.autograd.grad(loss, preds)
    _, expected = ref.burges_lambdas(
        preds.detach()[None], target[None], torch.ones(1, 3, dtype=torch.bool)
    )
    torch.testing.assert_close(grad, torch.tensor(expected[0], dtype=torch.float64))


# --- ApproxNDCGLoss -----------------------------------------------------------------------------


@pytest.mark.usefixtures("pair_path")
@pytest.mark.parametrize(
    ("temperature", "k", "reduction"), [(1.0, None, "mean"), (0.3, 3, "sum"), (2.0, 20, "none")]
)
def test_approx_blockwise_equals_dense(
    temperature: float, k: int | None, reduction: str, device: torch.device
) -> None:
    preds, target, mask = batch(3, 10, seed=4)
    ours = preds.clone().to(device).requires_grad_()
    dense = preds.clone().requires_grad_()
    got = approx_ndcg_loss(
        ours,
        target.to(device),
        temperature=temperature,
        k=k,
        reduction=reduction,
        mask=mask.to(device),
    )
    want = ref.approx_ndcg_dense(
        dense, target, mask, temperature=temperature, k=k, reduction=reduction
    )
    torch.testing.assert_close(got.cpu(), want)
    got.sum().backward()
    want.sum().backward()
    assert ours.grad is not None
    torch.testing.assert_close(ours.grad.cpu(), dense.grad)


@pytest.mark.parametrize("k", [None, 3])
def test_approx_gradcheck(k: int | None) -> None:
    preds, target, mask = batch(2, 6, seed=5)
    preds.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda p: approx_ndcg_loss(p, target, k=k, temperature=0.7, mask=mask, reduction="none"),
        (preds,),
    )


@pytest.mark.parametrize("k", [None, 1, 3])
def test_approx_tends_to_exact_ndcg_as_temperature_goes_to_zero(k: int | None) -> None:
    preds, target, mask = batch(4, 7, seed=6)
    exact = ndcg(preds, target, k=k, mask=mask)
    has_relevant = torch.where(mask, target, 0).amax(-1) > 0
    errors = []
    for temperature in (1.0, 1e-2, 1e-4):
        approx = 1 - approx_ndcg_loss(
            preds, target, temperature=temperature, k=k, mask=mask, reduction="none"
        )
        errors.append((approx - exact)[has_relevant].abs().max().item())
    assert errors[0] > 1e-3  # smooth at T = 1 ...
    assert errors[-1] < 1e-8  # ... exact in the limit
    assert errors == sorted(errors, reverse=True)


@pytest.mark.parametrize(
    ("gain", "discount"),
    [("linear", "jarvelin"), (lambda y: y**2, lambda r: 1 / r)],
    ids=["linear-jarvelin", "callables"],
)
def test_approx_limit_follows_the_metric_options(gain: Any, discount: Any) -> None:
    preds, target, mask = batch(3, 6, seed=11)
    exact = ndcg(preds, target, k=4, gain=gain, discount=discount, mask=mask)
    approx = 1 - approx_ndcg_loss(
        preds,
        target,
        k=4,
        gain=gain,
        discount=discount,
        temperature=1e-4,
        mask=mask,
        reduction="none",
    )
    torch.testing.assert_close(approx, exact)


def test_approx_worked_example() -> None:
    # Scores 0 and 1, relevant item (label 1) first: rank_0 = 1 + sigmoid(1), rank_1 = 1 +
    # sigmoid(-1); loss = 1 - (1 / log2(1 + rank_0)) / 1.
    preds = torch.tensor([0.0, 1.0], dtype=torch.float64)
    loss = approx_ndcg_loss(preds, torch.tensor([1, 0]))
    rank = 1 + 1 / (1 + math.exp(-1))
    assert loss.item() == pytest.approx(1 - 1 / math.log2(1 + rank), rel=1e-12)


# --- Both: module, reduction, padding, numerics, compile ----------------------------------------


@pytest.mark.parametrize(
    ("module", "function", "options"),
    [
        (
            LambdaRankLoss,
            lambdarank_loss,
            {"k": 3, "sigma": 2.0, "weighting": "ndcg2pp", "mu": 5.0},
        ),
        (ApproxNDCGLoss, approx_ndcg_loss, {"k": 3, "temperature": 0.5}),
    ],
)
def test_module_equals_function(module: Any, function: LossFn, options: dict[str, Any]) -> None:
    preds, target, mask = batch(seed=7)
    target = torch.where(mask, target, -1)
    loss_fn = module(**options, gain="linear", ignore_index=-1, reduction="none")
    expected = function(preds, target, **options, gain="linear", mask=mask, reduction="none")
    torch.testing.assert_close(loss_fn(preds, target), expected)
    assert "k=3" in repr(loss_fn)


@pytest.mark.parametrize("function", BOTH)
def test_reductions(function: LossFn) -> None:
    preds, target, mask = batch(4, 6, seed=8)
    target[1] = 0  # no relevant item: left out of the mean
    per_list = function(preds, target, mask=mask, reduction="none")
    assert per_list.shape == (4,)
    assert per_list[1].item() == 0
    torch.testing.assert_close(function(preds, target, mask=mask, reduction="sum"), per_list.sum())
    mean = function(preds, target, mask=mask)
    torch.testing.assert_close(mean, per_list.sum() / 3)
    leading = function(preds.reshape(2, 2, 6), target.reshape(2, 2, 6), reduction="none")
    assert leading.shape == (2, 2)


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("k", [None, 2, 6])  # 6 = the number of real items: no cut-off
def test_padding_equals_dropping_the_items(function: LossFn, k: int | None) -> None:
    preds, target, _ = batch(1, 8, seed=9)
    mask = torch.tensor([[True, False, True, True, False, True, True, True]])
    padded_preds = torch.where(mask, preds, float("nan"))  # padded values never reach arithmetic
    full = padded_preds.clone().requires_grad_()
    loss = function(full, target, mask=mask, k=k)
    loss.backward()
    short = preds[mask][None].clone().requires_grad_()
    expected = function(short, target[mask][None], k=k)
    torch.testing.assert_close(loss, expected)
    expected.backward()
    assert full.grad is not None
    assert short.grad is not None
    torch.testing.assert_close(full.grad[mask], short.grad[0])
    assert (full.grad[~mask] == 0).all()


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nothing_to_rank_gives_zero_loss_and_zero_gradient(
    function: LossFn, reduction: str
) -> None:
    preds = torch.randn(3, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
    cases = [
        (torch.zeros(3, 5, dtype=torch.long), None),  # no relevant item anywhere
        (torch.full((3, 5), -1), None),  # every item padded via ignore_index
        (torch.ones(3, 5, dtype=torch.long), torch.zeros(3, 5, dtype=torch.bool)),  # via mask
    ]
    for target, mask in cases:
        preds.grad = None
        loss = function(preds, target, mask=mask, ignore_index=-1, reduction=reduction)
        loss.backward()
        assert loss.item() == 0
        assert preds.grad is not None
        assert (preds.grad == 0).all()


CASES_GEN = torch.Generator().manual_seed(29)
NUMERIC_CASES = {
    "single item": (torch.tensor([[0.3]]), torch.tensor([[2]])),
    "all labels equal": (torch.randn(2, 6, generator=CASES_GEN), torch.full((2, 6), 3)),
    "all scores tied": (torch.zeros(2, 6), torch.tensor([[0, 1, 2, 3, 0, 1]] * 2)),
    "scores +-1e4": (
        torch.tensor([[1e4, -1e4, 1e4, -1e4, 0.0]]),
        torch.tensor([[0, 3, 1, 2, 0]]),
    ),
    "one padded row": (
        torch.randn(2, 4, generator=CASES_GEN),
        torch.tensor([[1, 0, 2, 0], [-1, -1, -1, -1]]),
    ),
}


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("case", NUMERIC_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_loss_and_gradient_are_finite(function: LossFn, case: str, dtype: torch.dtype) -> None:
    values, target = NUMERIC_CASES[case]
    preds = values.to(dtype, copy=True).requires_grad_()
    loss = function(preds, target, ignore_index=-1)
    assert loss.dtype == torch.float32  # half inputs are computed in float32
    assert torch.isfinite(loss)
    loss.backward()
    assert preds.grad is not None
    assert preds.grad.dtype == dtype
    assert torch.isfinite(preds.grad.float()).all()


def test_large_score_gaps_keep_their_gradient() -> None:
    # A badly misordered pair 1e4 apart: the softplus form keeps slope sigma * weight, where a
    # clamped log-sigmoid would give 0.
    preds = torch.tensor([-1e4, 1e4], requires_grad=True)
    lambdarank_loss(preds, torch.tensor([1, 0])).backward()
    weight = 1 - 1 / math.log2(3)
    assert preds.grad is not None
    torch.testing.assert_close(preds.grad, torch.tensor([-weight, weight]))


# Dynamo peeks at `.grad` of non-leaf tensors after the validation's graph break; inductor uses
# torch.jit internally. Neither warning is about this code.
@needs_torch_2_13_to_compile_losses
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize(
    "loss_fn", [LambdaRankLoss(weighting="ndcg2pp", k=3), ApproxNDCGLoss(k=3)], ids=repr
)
def test_torch_compile(loss_fn: torch.nn.Module) -> None:
    preds, target, mask = batch(2, 5, seed=10, dtype=torch.float32)
    eager = preds.clone().requires_grad_()
    compiled_preds = preds.clone().requires_grad_()
    compiled = torch.compile(loss_fn)  # the default (inductor) backend
    expected = loss_fn(eager, target, mask)
    got = compiled(compiled_preds, target, mask)
    torch.testing.assert_close(got, expected)
    got.backward()
    expected.backward()
    torch.testing.assert_close(compiled_preds.grad, eager.grad)


# Run in a fresh process: the peak RSS is per process and never falls, so in the suite's process
# an earlier test's larger peak would hide this one's (ru_maxrss of a child starts at its parent's
# peak: /proc's VmHWM is the process's own).
LOSS_MEMORY_PROBE = """
import torch
from torch_ndcg.functional import {name}

def peak_mib():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024

gen = torch.Generator().manual_seed(0)
warm = torch.randn(2, 64, generator=gen, requires_grad=True)
{name}(warm, torch.randint(0, 5, (2, 64), generator=gen)).backward()
preds = torch.randn(2, 4096, generator=gen, requires_grad=True)
target = torch.randint(0, 5, (2, 4096), generator=gen)
before = peak_mib()
{name}(preds, target).backward()
print(peak_mib() - before)
dense = torch.ones(2, 4096, 4096)  # what the probe shows for one [B, L, L] float32 tensor
print(peak_mib() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("name", ["lambdarank_loss", "approx_ndcg_loss"])
def test_long_lists_use_bounded_memory(name: str) -> None:
    """One [B, L, L] float32 tensor is 128 MiB here; the blockwise functions never hold one."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(
        [sys.executable, "-c", LOSS_MEMORY_PROBE.format(name=name)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    step_mib, with_dense_mib = (float(line) for line in result.stdout.split()[-2:])
    assert step_mib < 48
    assert with_dense_mib > 120  # the probe sees a [B, L, L] tensor


# --- Invariants ---------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    length=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    function=st.sampled_from(BOTH),
    k=st.sampled_from([None, 1, 3]),
)
def test_joint_permutation_changes_nothing(
    length: int, seed: int, function: LossFn, k: Any
) -> None:
    generator = torch.Generator().manual_seed(seed)
    preds = torch.randn(2, length, generator=generator, dtype=torch.float64)
    target = torch.randint(0, 4, (2, length), generator=generator)
    permutation = torch.randperm(length, generator=generator)
    loss = function(preds, target, k=k, reduction="none")
    permuted = function(preds[:, permutation], target[:, permutation], k=k, reduction="none")
    torch.testing.assert_close(loss, permuted)
    assert (loss >= 0).all()


@settings(max_examples=30, deadline=None)
@given(length=st.integers(2, 9), seed=st.integers(0, 2**16), weighting=st.sampled_from(WEIGHTINGS))
def test_lambdarank_perfect_order_beats_reversed(length: int, seed: int, weighting: Any) -> None:
    generator = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 4, (length,), generator=generator)
    perfect = target.double() * 10 + torch.rand(length, generator=generator, dtype=torch.float64)
    good = lambdarank_loss(perfect, target, weighting=weighting)
    bad = lambdarank_loss(-perfect, target, weighting=weighting)
    assert good <= bad
    if target.unique().numel() > 1:
        assert good < bad


# --- Errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"sigma": 0.0}, ValueError, r"`sigma` to be a positive finite float, but got 0.0"),
        ({"sigma": float("inf")}, ValueError, r"`sigma` to be a positive finite float"),
        ({"mu": -1.0}, ValueError, r"`mu` to be a non-negative finite float, but got -1.0"),
        ({"weighting": "ndcg1"}, ValueError, r"`weighting` to be one of .*'ndcg1'"),
        ({"reduction": "max"}, ValueError, r"`reduction` to be one of .*'max'"),
        ({"k": 0}, ValueError, r"`k` to be a positive int or None, but got 0"),
        ({"k": [1, 2]}, ValueError, r"`k` to be a positive int or None, but got \[1, 2\]"),
        ({"gain": "log"}, ValueError, r"`gain` to be one of"),
        ({"discount": "ln"}, ValueError, r"`discount` to be one of"),
        ({"ignore_index": 1.5}, TypeError, r"`ignore_index` to be an int or None"),
    ],
)
def test_lambdarank_errors(options: dict[str, Any], error: type[Exception], match: str) -> None:
    preds, target, _ = batch()
    with pytest.raises(error, match=match):
        lambdarank_loss(preds, target, **options)
    module_options = {key: value for key, value in options.items() if key != "mask"}
    with pytest.raises(error, match=match):
        LambdaRankLoss(**module_options)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"temperature": 0}, ValueError, r"`temperature` to be a positive finite float, but got 0"),
        ({"temperature": "1"}, ValueError, r"`temperature` to be a positive finite float"),
        ({"reduction": None}, ValueError, r"`reduction` to be one of"),
        ({"k": True}, ValueError, r"`k` to be a positive int or None, but got True"),
    ],
)
def test_approx_errors(options: dict[str, Any], error: type[Exception], match: str) -> None:
    preds, target, _ = batch()
    with pytest.raises(error, match=match):
        approx_ndcg_loss(preds, target, **options)
    with pytest.raises(error, match=match):
        ApproxNDCGLoss(**options)


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize(
    ("preds", "target", "mask", "error", "match"),
    [
        (torch.zeros(2, 3), torch.zeros(2, 4), None, ValueError, r"same shape"),
        (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3), None, TypeError, r"floating"),
        (torch.tensor([0.0, float("nan")]), torch.zeros(2), None, ValueError, r"no NaN"),
        (torch.zeros(2), torch.tensor([1, -2]), None, ValueError, r"non-negative"),
        (torch.zeros(2), torch.zeros(2), torch.ones(2), TypeError, r"`mask` to have dtype"),
        (torch.zeros(2), torch.zeros(2), torch.ones(3, dtype=torch.bool), ValueError, r"`mask`"),
        (torch.zeros(0), torch.zeros(0), None, ValueError, r"non-empty last"),
    ],
)
def test_tensor_errors(
    function: LossFn,
    preds: torch.Tensor,
    target: torch.Tensor,
    mask: Any,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        function(preds, target, mask=mask)


def test_exports() -> None:
    assert {"LambdaRankLoss", "ApproxNDCGLoss", "lambdarank_loss", "approx_ndcg_loss"} <= set(
        torch_ndcg.__all__
    )
    assert torch_ndcg.functional.lambdarank_loss is lambdarank_loss


# --- Real data: a shortened examples/train_ranker.py --------------------------------------------


@pytest.mark.parametrize("name", ["LambdaRankLoss (ndcg2pp)", "ApproxNDCGLoss"])
def test_short_training_on_real_data_learns_to_rank(name: str) -> None:
    import train_ranker

    train, test = train_ranker.load_lists("train"), train_ranker.load_lists("test")
    untrained = train_ranker.train_mlp(train_ranker.LOSSES[name], train, seed=0, epochs=0)
    model = train_ranker.train_mlp(train_ranker.LOSSES[name], train, seed=0, epochs=8)
    with torch.no_grad():
        before = train_ranker.test_ndcg(untrained(test.features).squeeze(-1), test)[-1]
        after = train_ranker.test_ndcg(model(test.features).squeeze(-1), test)[-1]
    assert after > before + 0.05
    assert after > 0.70


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize(("reduction", "shape"), [("mean", ()), ("sum", ()), ("none", (0,))])
def test_empty_batch_gives_zero_loss(
    function: LossFn, reduction: str, shape: tuple[int, ...]
) -> None:
    preds = torch.zeros(0, 4, requires_grad=True)
    loss = function(preds, torch.zeros(0, 4), reduction=reduction)
    assert loss.shape == shape
    assert (loss == 0).all()


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("bad", [float("inf"), float("-inf")])
def test_infinite_scores_are_rejected(function: LossFn, bad: float) -> None:
    with pytest.raises(ValueError, match=r"`preds` to be finite, but found -?inf"):
        function(torch.tensor([bad, 1.0, 0.0]), torch.tensor([0, 1, 2]))
    # Padded items may hold anything.
    mask = torch.tensor([False, True, True])
    assert torch.isfinite(
        function(torch.tensor([bad, 1.0, 0.0]), torch.tensor([0, 1, 2]), mask=mask)
    )


# --- Lists that count for nothing ----------------------------------------------------------------


@pytest.mark.parametrize("loss", [lambdarank_loss, approx_ndcg_loss, neural_ndcg_loss])
def test_a_discount_that_zeroes_the_ideal_dcg_gives_zero_loss_and_gradient(loss: Any) -> None:
    # D(1) = 0: the ideal DCG@1 of every list is 0, so no list counts (whatever its gains).
    # Unchecked: the checks refuse a discount of 0 at rank 1 (test_validation.py).
    preds = torch.tensor([[1.0, 2.0, 0.5], [0.3, 0.1, 0.2]], requires_grad=True)
    target, discount = torch.tensor([[1, 0, 2], [0, 1, 0]]), lambda r: 1 / r - 1
    value = loss(preds, target, k=1, discount=discount, validate_args=False)
    value.backward()
    assert value.item() == 0
    assert preds.grad is not None
    assert torch.equal(preds.grad, torch.zeros_like(preds))


def test_an_uncounted_list_adds_nothing_even_where_its_terms_overflow() -> None:
    # validate_args=False with score gaps that overflow: the list with no relevant item gives
    # 0 * inf = NaN per list, but the mean is over the counted list alone.
    preds = torch.tensor([[3e38, -3e38], [1.0, 2.0]])
    target = torch.tensor([[0, 0], [1, 0]])
    mean = lambdarank_loss(preds, target, validate_args=False)
    only = lambdarank_loss(preds[1:], target[1:], validate_args=False)
    assert mean.item() == pytest.approx(only.item())


# --- The dense path of small batches against the blockwise path ----------------------------------


def _step(function: LossFn, preds: torch.Tensor, target: torch.Tensor, **options: Any) -> Any:
    leaf = preds.clone().requires_grad_()
    loss = function(leaf, target, **options)
    loss.sum().backward()
    return loss.detach(), leaf.grad


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("function", "options"),
    [
        (lambdarank_loss, {"weighting": "lambdarank"}),
        (lambdarank_loss, {"weighting": "ndcg2", "sigma": 2.5}),
        (lambdarank_loss, {"weighting": "ndcg2pp", "mu": 3.0}),
        (approx_ndcg_loss, {}),
        (approx_ndcg_loss, {"temperature": 0.3}),
    ],
    ids=["lambdarank", "ndcg2", "ndcg2pp", "approx", "approx-T0.3"],
)
@pytest.mark.budget
def test_small_batches_dense_path_equals_the_blockwise_path(
    function: LossFn, options: dict[str, Any], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loss and gradient of the dense path (whole ``[N, L, L]`` tensors and a hand-derived
    gradient, taken by batches of at most `DENSE_PAIR_ELEMENTS` pairs; autograd's for a callable
    discount of ApproxNDCG) equal the blockwise Functions' on random
    input: ties, padding by mask or ``ignore_index``, cut-offs, weights, a callable discount,
    float64, unchecked input and every reduction, each in some of the seeds."""
    generator = torch.Generator().manual_seed(seed)
    n, length = 2 + seed % 3, 3 + 2 * seed
    dtype = torch.float64 if seed % 3 == 2 else torch.float32
    preds = torch.randn(n, length, generator=generator, dtype=dtype)
    if seed % 2 == 0:  # ties
        preds = torch.randint(0, 3, (n, length), generator=generator).to(dtype)
    target = torch.randint(0, 4, (n, length), generator=generator)
    target[0] = 0  # a list with no relevant item
    options = {
        **options,
        "k": [None, 1, 3][seed % 3],
        "reduction": ["mean", "sum", "none"][seed % 3],
        "discount": ["log2", "jarvelin", lambda r: 1 / r][seed % 3],
        "validate_args": seed != 5,
    }
    if seed % 2 == 1:
        options["mask"] = torch.rand(n, length, generator=generator) > 0.3
    if seed == 4:
        target[:, -1] = -1
        options["ignore_index"] = -1
    if seed in (1, 4):
        options["weight"] = torch.rand(n, length, generator=generator, dtype=dtype)
    from torch_ndcg import _pairwise

    assert _pairwise.dense_pairs_fit(n, length)
    dense = _step(function, preds, target, **options)
    monkeypatch.setattr(_pairwise, "DENSE_PAIR_ELEMENTS", 0)
    blockwise = _step(function, preds, target, **options)
    torch.testing.assert_close(dense, blockwise)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("function", BOTH)
@pytest.mark.budget
def test_a_small_batch_step_is_one_autograd_node(function: LossFn, reduction: str) -> None:
    """A small batch's loss (the dense path, reduction included) is one autograd node whose
    input is the scores' leaf: a step's host time there is its nodes and operations. (With a
    mask, padded scores are zeroed first: one node more.)"""
    preds, target, _ = batch(4, 8, seed=6)
    leaf = preds.clone().requires_grad_()
    loss = function(leaf, target, k=3, reduction=reduction)
    assert loss.grad_fn is not None
    assert [type(node).__name__ for node, _ in loss.grad_fn.next_functions if node] == [
        "AccumulateGrad"
    ]


@pytest.mark.parametrize("function", BOTH)
def test_second_derivative_through_the_dense_path_raises(function: LossFn) -> None:
    """Under ``create_graph`` the first derivative is right (as without it); differentiating it
    again raises, rather than treating the kept gradient as a constant (a silent 0)."""
    preds, target, mask = batch(2, 6, seed=7)
    leaf = preds.clone().requires_grad_()
    (grad,) = torch.autograd.grad(function(leaf, target, mask=mask), leaf, create_graph=True)
    (expected,) = torch.autograd.grad(function(leaf, target, mask=mask), leaf)
    torch.testing.assert_close(grad, expected)
    with pytest.raises(RuntimeError, match="no second derivative"):
        (grad.square().sum() + leaf.sum()).backward()
    # With respect to the scores themselves (the error leads back to them), and a Hessian.
    def loss_of(x: torch.Tensor) -> torch.Tensor:
        return function(x, target, mask=mask)

    (again,) = torch.autograd.grad(loss_of(leaf), leaf, create_graph=True)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(again.sum(), leaf)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.functional.hessian(loss_of, leaf.detach())


SMALL_BATCH_ERRORS = [
    (torch.tensor([[0.1, float("nan"), 0.3]]), torch.tensor([[1, 0, 2]])),
    (torch.tensor([[0.1, float("inf"), 0.3]]), torch.tensor([[1, 0, 2]])),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1, -1, 2]])),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1, 0, 200]])),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1.0, float("nan"), 2.0]])),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1.0, -0.5, 2.0]])),
    (torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[1.0, float("inf"), 2.0]])),
]


@pytest.mark.parametrize("function", [*BOTH, neural_ndcg_loss])
@pytest.mark.parametrize(("preds", "target"), SMALL_BATCH_ERRORS)
@pytest.mark.budget
def test_small_batch_checks_raise_the_general_checks_error(
    function: LossFn, preds: torch.Tensor, target: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small plain batch is checked in one straight read (`dense_checks`); input that breaks
    a rule gets the error of the general checks, word for word."""
    with pytest.raises(ValueError, match="Expected") as small:
        function(preds, target)
    monkeypatch.setattr(torch_ndcg.functional._loss_input, "dense_checks", lambda *args: None)
    with pytest.raises(ValueError, match="Expected") as general:
        function(preds, target)
    assert str(small.value) == str(general.value)


@pytest.mark.budget
def test_small_batch_checks_leave_labels_past_the_scores_precision_to_the_general_checks() -> None:
    """The labels' extremes are read in the scores' dtype: an integer label that float32 may round
    (2^24 + 1 reads as 2^24) is checked by the general checks, exactly; one below is read so."""
    from torch_ndcg.functional import _loss_input

    options = _loss_input.check_options(
        {}, gain="linear", reduction="mean", ignore_index=None, validate_args=True
    )
    preds = torch.tensor([[0.1, 0.2, 0.3]])
    below = _loss_input.dense_checks(preds, torch.tensor([[0, 1, 2**24 - 1]]), options)
    assert below is not None
    assert _loss_input.dense_checks(preds, torch.tensor([[0, 1, 2**24 + 1]]), options) is None


@pytest.mark.parametrize("function", [*BOTH, neural_ndcg_loss])
def test_small_batch_checks_give_the_swapped_arguments_hint(function: LossFn) -> None:
    """Label-like scores with fractional float labels: the general checks' hint, as for a
    large batch."""
    labels_as_scores = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    scores_as_labels = torch.tensor([[0.1, 0.9, 0.4, 0.2]])
    with pytest.warns(UserWarning, match="were scores and labels swapped"):
        function(labels_as_scores, scores_as_labels)


@pytest.mark.parametrize("function", [*BOTH, neural_ndcg_loss])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("float_labels", [False, True])
@pytest.mark.budget
def test_small_batch_checks_give_the_same_loss(
    function: LossFn, dtype: torch.dtype, float_labels: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same loss and gradient, to the bit, with the small batch's checks as without (integer
    labels, and fractional float labels)."""
    preds, target, _ = batch(4, 7, seed=8, dtype=dtype)
    if float_labels:
        target = target.to(dtype) / 2
    small = _step(function, preds, target, k=3)
    monkeypatch.setattr(torch_ndcg.functional._loss_input, "dense_checks", lambda *args: None)
    general = _step(function, preds, target, k=3)
    torch.testing.assert_close(small, general, rtol=0, atol=0)
