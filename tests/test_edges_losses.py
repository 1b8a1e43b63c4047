"""The losses at the edges of their input: scores far apart, options set late, huge weights.

PL-Rank's gradient against the exact gradient of the Plackett-Luce policy's expected nDCG
(``tests/references.pl_expected_metric``, every ranking enumerated in float64) when the other
items trail the best by more than float64's ``exp`` can span; `UnbiasedLambdaRankLoss`'s
``num_positions`` set after it is made, and its statistics on scores 2e39 apart (against the
same loss in float64, whose statistics hold them); a ``weight`` that overflows a loss, named as
the other value checks name their argument on the CPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_ndcg.losses
from tests.host_reads import count_host_reads
from tests.references import (
    discount_function,
    gain_function,
    ideal_dcg_one_list,
    pl_expected_metric,
    pl_rank_estimate,
)
from torch_ndcg import (
    ApproxNDCGLoss,
    LambdaRankLoss,
    ListMLELoss,
    NeuralNDCGLoss,
    PLRankLoss,
    RankNetLoss,
    SoftmaxLoss,
    UnbiasedLambdaRankLoss,
    XENDCGLoss,
    approx_ndcg_loss,
    lambdarank_loss,
    listmle_loss,
    neural_ndcg_loss,
    pl_rank_loss,
    ranknet_loss,
    sample_rankings,
    softmax_loss,
    xe_ndcg_loss,
)

# --- PL-Rank far below the best -----------------------------------------------------------------


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def exact_gradient(scores: list[float], labels: list[int], k: int | None, gain: Any) -> Any:
    """The gradient of the policy's exact expected nDCG@k (float64, every ranking enumerated)."""
    gain_fn, discount_fn = gain_function(gain), discount_function("log2")
    cutoff = len(labels) if k is None else k
    ideal = ideal_dcg_one_list([float(y) for y in labels], cutoff, gain=gain_fn)
    rho = [gain_fn(float(y)) / ideal for y in labels]
    leaf = torch.tensor(scores, dtype=torch.float64, requires_grad=True)
    (gradient,) = torch.autograd.grad(pl_expected_metric(leaf, rho, cutoff, discount_fn), leaf)
    return gradient


def exponential(labels: torch.Tensor) -> torch.Tensor:
    """The exponential gain as a callable (its sums are then taken with signs)."""
    return 2.0**labels - 1.0


PL_CASES: dict[str, tuple[list[float], list[int], int | None, Any]] = {
    # the list at two gaps: the two trailing items compete alike at both
    "gap 100": ([100.0, 0.0, -5.0], [0, 1, 2], None, "exponential"),
    "gap 700": ([700.0, 0.0, -5.0], [0, 1, 2], None, "exponential"),
    "gap 700, k=2": ([700.0, 0.0, -5.0, -3.0], [0, 2, 1, 1], 2, "exponential"),
    "gap 1e4 twice, callable gain": ([2e4, 1e4, 1e4 - 1.0, 0.0], [1, 0, 2, 1], None, exponential),
}


@pytest.mark.parametrize("validate", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", list(PL_CASES))
def test_pl_rank_gradient_is_the_exact_one_however_far_the_scores_trail(
    case: str, dtype: torch.dtype, validate: bool
) -> None:
    """The mean of many independent estimates against autograd of the exact expected nDCG@k:
    within 5 standard errors. Before, scores more than 650 below the best were estimated as
    if they were 650 below it, all alike: at a gap of 700 the trailing items' gradient was
    [0.2033, -0.0321] (exact: [-0.00048, 0.00048], as at a gap of 100)."""
    scores, labels, k, gain = PL_CASES[case]
    copies, samples = 4000, 50
    preds = torch.tensor(scores, dtype=dtype).repeat(copies, 1).requires_grad_()
    target = torch.tensor(labels).repeat(copies, 1)
    generator = torch.Generator().manual_seed(1)
    loss = pl_rank_loss(
        preds, target, k=k, gain=gain, num_samples=samples, generator=generator,
        reduction="none", validate_args=validate,
    )  # fmt: skip
    loss.sum().backward()
    assert preds.grad is not None
    estimates = -preds.grad.double()  # [copies, L]: independent estimates
    expected = exact_gradient(scores, labels, k, gain)
    error = (estimates.mean(0) - expected).abs()
    standard_error = estimates.std(0) / math.sqrt(copies)
    tolerance = 1e-6 if dtype == torch.float32 else 1e-12
    assert (error <= 5 * standard_error + tolerance).all(), (estimates.mean(0), expected)
    assert (standard_error < 0.2 * expected.abs().max()).all()  # a test that can fail


def root_discount(ranks: Any) -> Any:
    """A callable discount, 1 / sqrt(r), of tensors and numbers (its sums are taken with signs)."""
    return ranks**-0.5


LOOP_CASES: dict[str, tuple[float, int | None, Any, bool]] = {
    # gap of the first item above the others, k, discount, weighted
    "gap 2": (2.0, None, "log2", False),
    "gap 700": (700.0, None, "log2", False),
    "gap 700, k=3, weighted": (700.0, 3, "log2", True),
    "gap 705, callable discount": (705.0, 2, root_discount, False),
}


@pytest.mark.parametrize("validate", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("case", list(LOOP_CASES))
def test_pl_rank_equals_the_loop_formula_far_below_the_best(case: str, validate: bool) -> None:
    """The estimate on the very rankings drawn (`sample_rankings`, same generator state)
    against PL-Rank's formula by loops, with its probabilities e^{s_d} / sum e^{s} summed out
    loud in float64 (finite up to a gap of 709): to rounding, with padding inside the lists."""
    gap, k, discount, weighted = LOOP_CASES[case]
    gen = torch.Generator().manual_seed(3)
    n, length, samples = 3, 6, 9
    preds = torch.randn(n, length, generator=gen, dtype=torch.float64)
    preds[:, 0] = preds[:, 1:].amax(1) + gap
    target = torch.randint(0, 4, (n, length), generator=gen)
    target[:, 1] = 2  # a relevant item among the trailing ones of every list
    mask = torch.ones(n, length, dtype=torch.bool)
    mask[1, 3] = mask[2, 5] = False
    weight = torch.rand(n, length, generator=gen, dtype=torch.float64) + 0.5 if weighted else None
    rankings = sample_rankings(preds, samples, k=k, mask=mask, generator=seeded(5))
    leaf = preds.clone().requires_grad_()
    loss = pl_rank_loss(
        leaf, target, mask=mask, weight=weight, k=k, discount=discount, num_samples=samples,
        generator=seeded(5), reduction="none", validate_args=validate,
    )  # fmt: skip
    loss.sum().backward()
    assert leaf.grad is not None
    cutoff = length if k is None else k
    gain_fn, discount_fn = gain_function("exponential"), discount_function(discount)
    for row in range(n):
        real = [i for i in range(length) if mask[row, i]]
        labels = [float(target[row, i]) for i in real]
        ideal = ideal_dcg_one_list(labels, cutoff, gain=gain_fn, discount=discount_fn)
        weights = [1.0 if weight is None else float(weight[row, i]) for i in real]
        rho = [gain_fn(y) * w / ideal for y, w in zip(labels, weights, strict=True)]
        position = {item: j for j, item in enumerate(real)}
        drawn = [[position[i] for i in ranking if i >= 0] for ranking in rankings[row].tolist()]
        scores = [float(preds[row, i]) for i in real]
        estimate, metric = pl_rank_estimate(scores, rho, drawn, cutoff, discount_fn)
        expected = torch.zeros(length, dtype=torch.float64)
        expected[real] = torch.tensor(estimate, dtype=torch.float64)
        torch.testing.assert_close(leaf.grad[row], -expected, rtol=1e-9, atol=1e-12)
        assert loss[row].item() == pytest.approx(1 - metric, rel=1e-9, abs=1e-12)


def test_pl_rank_far_behind_the_best_is_as_one_gap_apart() -> None:
    """The issue's case: the same rankings drawn at gaps 100 and 700 (the best is always first,
    the others follow their own scores) give the same estimate, to rounding."""
    gradients = []
    for gap in (100.0, 700.0):
        preds = torch.tensor([[gap, 0.0, -5.0]], dtype=torch.float64, requires_grad=True)
        target = torch.tensor([[0, 1, 2]])
        generator = torch.Generator().manual_seed(0)
        pl_rank_loss(preds, target, num_samples=20_000, generator=generator).backward()
        assert preds.grad is not None
        gradients.append(preds.grad)
    torch.testing.assert_close(gradients[1], gradients[0], rtol=1e-9, atol=1e-15)


# --- UnbiasedLambdaRankLoss: num_positions, and statistics that cannot overflow ---------------


def test_num_positions_is_fixed_once_the_loss_is_made() -> None:
    """Before, a new `num_positions` was accepted while the biases kept their size: training
    raised a size mismatch later, and eval() gave 0.8069 where a fresh loss gives 0.3303."""
    loss_fn = UnbiasedLambdaRankLoss(num_positions=4)
    for value in (3, 6, 4):
        message = (
            "`num_positions` of `UnbiasedLambdaRankLoss` is fixed when the loss is made (it is "
            f"4; got {value})"
        )
        with pytest.raises(AttributeError, match=re.escape(message)):
            loss_fn.num_positions = value
    assert loss_fn.num_positions == 4
    assert [tuple(b.shape) for b in (loss_fn.t_plus, loss_fn.t_minus, loss_fn.statistics)] == [
        (4,),
        (4,),
        (4, 4),
    ]
    # The other options are set as before, and shown.
    for name, value in {"sigma": 2.0, "k": 3, "momentum": 0.5, "bias_norm": 1.0}.items():
        setattr(loss_fn, name, value)
    assert repr(loss_fn) == (
        "UnbiasedLambdaRankLoss(num_positions=4, k=3, sigma=2.0, bias_norm=1.0, momentum=0.5, "
        "match_exposure=True)"
    )
    preds = torch.tensor([[0.5, 0.1, -0.3, 0.2]])
    clicks, positions = torch.tensor([[1, 0, 1, 0]]), torch.tensor([[0, 1, 2, 3]])
    fresh = UnbiasedLambdaRankLoss(num_positions=4, sigma=2.0, k=3, momentum=0.5, bias_norm=1.0)
    torch.testing.assert_close(loss_fn(preds, clicks, positions), fresh(preds, clicks, positions))
    torch.testing.assert_close(loss_fn.statistics, fresh.statistics)


FAR_APART = torch.tensor([[-1e39, 1e39, 0.0, 1.0]], dtype=torch.float64)
CLICKS, POSITIONS = torch.tensor([[1, 0, 1, 0]]), torch.tensor([[0, 1, 2, 3]])
FLOAT32_MAX = torch.finfo(torch.float32).max


def _one_hot_counts(clicks: torch.Tensor, positions: torch.Tensor, n: int) -> Any:
    """`aggregated`'s counts of one session: each item shown once at its position."""
    views = torch.nn.functional.one_hot(positions, n).double()
    return views * clicks[..., None], views


@pytest.mark.parametrize("entry", ["forward", "aggregated"])
def test_scores_far_apart_never_corrupt_the_statistics(entry: str) -> None:
    """Float64 scores 2e39 apart: the pair losses (1e39) do not fit the float32 statistics.
    The step is left out of the sums it would overflow, never inf or clipped (before:
    inf, and t_plus [nan, 1, nan, 1], after which every step raised, blaming `sigma`); the
    loss is that of the same loss in float64, and so are the statistics that fit."""
    loss_fn = UnbiasedLambdaRankLoss(num_positions=4)
    reference = UnbiasedLambdaRankLoss(num_positions=4).double()  # float64 holds 1e39

    def step(module: UnbiasedLambdaRankLoss, preds: torch.Tensor) -> torch.Tensor:
        if entry == "forward":
            return module(preds, CLICKS, POSITIONS)
        clicks, views = _one_hot_counts(CLICKS, POSITIONS, 4)
        return module.aggregated(preds, clicks.to(preds.dtype), views.to(preds.dtype))

    torch.testing.assert_close(step(loss_fn, FAR_APART), step(reference, FAR_APART))
    assert reference.statistics.abs().max() > FLOAT32_MAX  # the case: float32 cannot hold them
    fits = reference.statistics <= FLOAT32_MAX  # the sums that fit
    expected = torch.where(fits, reference.statistics, 0).float()  # the others: as before, 0
    torch.testing.assert_close(loss_fn.statistics, expected)
    for bias in (loss_fn.t_plus, loss_fn.t_minus):
        assert torch.isfinite(bias).all()
        assert (bias > 0).all()
        assert bias[0] == 1  # the top position's bias is 1
    # Later steps train and evaluate as usual.
    generator = torch.Generator().manual_seed(0)
    for dtype in (torch.float64, torch.float32, torch.float64):
        preds = torch.randn(1, 4, generator=generator, dtype=dtype, requires_grad=True)
        loss = step(loss_fn, preds)
        loss.backward()
        assert torch.isfinite(loss)
        assert preds.grad is not None
        assert torch.isfinite(preds.grad).all()
        assert torch.isfinite(loss_fn.statistics).all()
    loss_fn.eval()
    assert torch.isfinite(step(loss_fn, torch.randn(1, 4, generator=generator)))


def test_an_unchecked_nan_score_leaves_the_biases_finite() -> None:
    """With the checks off a NaN score gives a NaN loss; the step is left out of the sums it
    touches (before: NaN statistics, and NaN biases from then on), so the statistics and
    biases stay finite and as they were."""
    loss_fn = UnbiasedLambdaRankLoss(num_positions=4, validate_args=False)
    preds = torch.tensor([[0.5, 0.1, -0.3, 0.2]])
    loss_fn(preds, CLICKS, POSITIONS)
    t_plus, t_minus = loss_fn.t_plus.clone(), loss_fn.t_minus.clone()
    loss_fn(torch.tensor([[math.nan, 0.1, -0.3, 0.2]]), CLICKS, POSITIONS)
    assert torch.isfinite(loss_fn.statistics).all()
    assert torch.equal(loss_fn.t_plus, t_plus)
    assert torch.equal(loss_fn.t_minus, t_minus)
    assert torch.isfinite(loss_fn(preds, CLICKS, POSITIONS))


# --- A weight that overflows a loss is a ValueError on the CPU ----------------------------------

LOSS_CALLS: dict[str, Callable[..., torch.Tensor]] = {
    "lambdarank_loss": lambdarank_loss,
    "approx_ndcg_loss": approx_ndcg_loss,
    "neural_ndcg_loss": neural_ndcg_loss,
    "softmax_loss": softmax_loss,
    "xe_ndcg_loss": xe_ndcg_loss,
    "pl_rank_loss": pl_rank_loss,
    "ranknet_loss": ranknet_loss,
    "listmle_loss": listmle_loss,
    "LambdaRankLoss": lambda *a, reduction, **kw: LambdaRankLoss(reduction=reduction)(*a, **kw),
    "ApproxNDCGLoss": lambda *a, reduction, **kw: ApproxNDCGLoss(reduction=reduction)(*a, **kw),
    "NeuralNDCGLoss": lambda *a, reduction, **kw: NeuralNDCGLoss(reduction=reduction)(*a, **kw),
    "SoftmaxLoss": lambda *a, reduction, **kw: SoftmaxLoss(reduction=reduction)(*a, **kw),
    "XENDCGLoss": lambda *a, reduction, **kw: XENDCGLoss(reduction=reduction)(*a, **kw),
    "PLRankLoss": lambda *a, reduction, **kw: PLRankLoss(reduction=reduction)(*a, **kw),
    "RankNetLoss": lambda *a, reduction, **kw: RankNetLoss(reduction=reduction)(*a, **kw),
    "ListMLELoss": lambda *a, reduction, **kw: ListMLELoss(reduction=reduction)(*a, **kw),
}
PREDS = torch.tensor([[0.0, 5.0, 1.0]]).expand(4, 3)
TARGET = torch.tensor([[1, 0, 2]]).expand(4, 3)


@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("name", list(LOSS_CALLS))
def test_an_overflowing_weight_is_a_value_error_naming_it(name: str, reduction: str) -> None:
    """Before: a RuntimeError (the device-side form of the check) on the CPU, where every other
    value check raises ValueError."""
    message = (
        "Expected `weight` to keep the loss and its gradient finite in torch.float32, but its "
        "largest value is 1e+38 (with this input they could reach"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        LOSS_CALLS[name](PREDS, TARGET, weight=torch.full((4, 3), 1e38), reduction=reduction)
    # Weights that fit are taken; padded weights are never read.
    fine = LOSS_CALLS[name](PREDS, TARGET, weight=torch.full((4, 3), 1e30), reduction=reduction)
    assert torch.isfinite(fine).all()
    mask = torch.tensor([[True, True, False]]).expand(4, 3)
    padded = torch.tensor([[1.0, 1.0, 1e38]]).expand(4, 3)
    masked = LOSS_CALLS[name](PREDS, TARGET, mask=mask, weight=padded, reduction=reduction)
    assert torch.isfinite(masked).all()


@pytest.mark.parametrize(
    "name", ["lambdarank_loss", "softmax_loss", "pl_rank_loss", "ranknet_loss", "listmle_loss"]
)
@pytest.mark.budget
def test_the_weight_scale_is_judged_in_the_one_read_back(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The largest weight comes back with the other checks' values: one read-back on the CPU;
    none on an accelerator's paths, where the check is a device-side assertion."""
    weight = torch.full((4, 3), 1e38)
    with count_host_reads() as reads, pytest.raises(ValueError, match="`weight`"):
        LOSS_CALLS[name](PREDS, TARGET, weight=weight, reduction="sum")
    assert len(reads) == 1, reads
    with count_host_reads() as reads:
        LOSS_CALLS[name](PREDS, TARGET, weight=torch.ones(4, 3), reduction="sum")
    assert len(reads) == 1, reads
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    with count_host_reads() as reads, pytest.raises(RuntimeError, match="`weight` to keep"):
        LOSS_CALLS[name](PREDS, TARGET, weight=weight, reduction="sum")
    assert reads == []


# --- A batch of no list ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", torch_ndcg.losses.__all__)
@pytest.mark.parametrize("shape", [(0, 5), (2, 0, 5)])
@pytest.mark.parametrize("validate_args", [True, False])
def test_every_loss_module_gives_0_with_a_zero_gradient_on_a_batch_of_no_list(
    name: str, shape: tuple[int, ...], validate_args: bool
) -> None:
    """As `torch.nn.CrossEntropyLoss(reduction="sum")` on an empty batch: 0, not an error."""
    preds = torch.zeros(shape, requires_grad=True)
    target = torch.zeros(shape, dtype=torch.long)
    if name == "UnbiasedLambdaRankLoss":
        loss_fn = torch_ndcg.UnbiasedLambdaRankLoss(num_positions=5, validate_args=validate_args)
        loss = loss_fn(preds, target.float(), target)
    else:
        loss = getattr(torch_ndcg, name)(validate_args=validate_args)(preds, target)
    loss.backward()
    assert loss.item() == 0
    assert preds.grad is not None
    assert preds.grad.shape == shape
