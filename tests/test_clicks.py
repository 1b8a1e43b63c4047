"""Learning from clicks: per-item weights, click simulation, IPS evaluation, Unbiased LambdaRank."""

from __future__ import annotations

import datetime
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests import references
from tests.conftest import needs_torch_2_13_to_compile_losses
from tests.host_reads import count_host_reads
from tests.spawn import run_ranks
from torch_ndcg import (
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    UnbiasedLambdaRankLoss,
    approx_ndcg_loss,
    dcg,
    examination_probability,
    lambdarank_loss,
    neural_ndcg_loss,
    simulate_clicks,
)

LOSS_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "lambdarank": lambda *a, **kw: lambdarank_loss(*a, weighting="ndcg2pp", **kw),
    "approx": approx_ndcg_loss,
    "neural": neural_ndcg_loss,
}


def _lists(seed: int = 0, n: int = 6, length: int = 9) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    preds = torch.randn(n, length, generator=gen, dtype=torch.float64)
    target = torch.randint(0, 4, (n, length), generator=gen)
    mask = torch.rand(n, length, generator=gen) > 0.2
    weight = torch.rand(n, length, generator=gen, dtype=torch.float64) * 3
    return preds, target, mask, weight


def _loss_and_grad(
    fn: Callable[..., torch.Tensor], preds: torch.Tensor, *args: Any, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    leaf = preds.clone().requires_grad_()
    loss = fn(leaf, *args, **kwargs)
    loss.backward()
    assert leaf.grad is not None
    return loss.detach(), leaf.grad


# --- weight= in the losses ----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LOSS_FUNCTIONS))
@pytest.mark.parametrize("k", [None, 3])
def test_unit_weights_give_todays_values_exactly(name: str, k: int | None) -> None:
    preds, target, mask, _ = _lists()
    fn = LOSS_FUNCTIONS[name]
    for options in ({"mask": mask}, {}):
        plain = _loss_and_grad(fn, preds, target, k=k, **options)
        ones = _loss_and_grad(fn, preds, target, k=k, weight=torch.ones_like(preds), **options)
        assert torch.equal(plain[0], ones[0])
        assert torch.equal(plain[1], ones[1])


def _ideal(labels: torch.Tensor, mask: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """Ideal DCG@k of linear gains per list: the labels ranked by themselves."""
    return dcg(labels.double(), labels.double(), k=k, gain="linear", mask=mask)


@pytest.mark.parametrize("name", list(LOSS_FUNCTIONS))
def test_a_weight_scales_the_gain_and_keeps_the_ideal_dcg(name: str) -> None:
    """Weights w on labels y: the loss of labels w * y, normalised by the ideal DCG of y.

    LambdaLoss is linear in the normalised gains (loss * Z agrees), ApproxNDCG and NeuralNDCG
    are one minus them ((1 - loss) * Z agrees); the gradients scale alike.
    """
    preds, target, mask, weight = _lists(1)
    fn = LOSS_FUNCTIONS[name]
    options = {"mask": mask, "gain": "linear", "k": 4, "reduction": "none"}
    weighted = _loss_and_grad(lambda p: fn(p, target, weight=weight, **options).sum(), preds)
    scaled = _loss_and_grad(lambda p: fn(p, target * weight, **options).sum(), preds)
    z_plain, z_scaled = _ideal(target, mask, 4), _ideal(target * weight, mask, 4)
    per_list = fn(preds, target, weight=weight, **options)
    per_list_scaled = fn(preds, target * weight, **options)
    if name != "lambdarank":
        per_list, per_list_scaled = 1 - per_list, 1 - per_list_scaled
    torch.testing.assert_close(per_list * z_plain, per_list_scaled * z_scaled)
    torch.testing.assert_close(
        weighted[1] * z_plain[:, None], scaled[1] * z_scaled[:, None], rtol=1e-9, atol=1e-12
    )


@pytest.mark.parametrize("name", list(LOSS_FUNCTIONS))
def test_the_weight_of_a_single_click_is_not_normalised_away(name: str) -> None:
    """IPS on a session with one click scales its loss term by the click's weight."""
    preds = torch.tensor([[0.3, -0.2, 1.1, 0.4]], dtype=torch.float64)
    clicks = torch.tensor([[0, 1, 0, 0]])
    weight = torch.tensor([[1.0, 3.0, 2.0, 5.0]], dtype=torch.float64)
    fn = LOSS_FUNCTIONS[name]
    plain, weighted = fn(preds, clicks), fn(preds, clicks, weight=weight)
    if name != "lambdarank":
        plain, weighted = 1 - plain, 1 - weighted
    torch.testing.assert_close(weighted, 3 * plain)
    # On 0/1 clicks the exponential gain is the click itself.
    torch.testing.assert_close(
        fn(preds, clicks, weight=weight, gain="linear"), fn(preds, clicks, weight=weight)
    )


def test_weighted_lambdarank_equals_the_dense_reference_on_scaled_labels() -> None:
    """Against the materialised-pairs reference, normalised by the unweighted ideal DCG."""
    preds, target, mask, _ = _lists(2)
    weight = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).repeat(3)[None].expand_as(preds)
    got = lambdarank_loss(preds, target, mask=mask, weight=weight, gain="linear", reduction="none")
    # Linear gains of w * y: the reference's exponential gain of log2(1 + w y).
    labels = torch.log2(1 + weight * target)
    expected = references.lambdaloss_dense(preds, labels, mask, reduction="none")
    z_ratio = _ideal(target * weight, mask) / _ideal(target, mask)
    torch.testing.assert_close(got, expected * z_ratio.nan_to_num(0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "cls", [LambdaRankLoss, ApproxNDCGLoss, NeuralNDCGLoss], ids=lambda c: c.__name__
)
def test_modules_take_weight(cls: type) -> None:
    preds, target, mask, weight = _lists(3)
    module = cls(k=5)
    function = {
        LambdaRankLoss: lambdarank_loss,
        ApproxNDCGLoss: approx_ndcg_loss,
        NeuralNDCGLoss: neural_ndcg_loss,
    }[cls]
    assert torch.equal(
        module(preds, target, mask, weight=weight),
        function(preds, target, k=5, mask=mask, weight=weight),
    )


WEIGHT_ERRORS = [
    (torch.full((6, 9), -0.5), ValueError, "Expected `weight` to be non-negative, but found -0.5"),
    (torch.full((6, 9), math.nan), ValueError, "Expected `weight` to contain no NaN"),
    (torch.full((6, 9), math.inf), ValueError, "Expected `weight` to be finite, but found inf"),
    (torch.ones(6, 8), ValueError, r"Expected `weight` to have the shape of `preds` \(6, 9\)"),
    (torch.ones(6, 9, dtype=torch.long), TypeError, "Expected `weight` to be a floating tensor"),
    ([1.0] * 9, TypeError, "Expected `weight` to be a torch.Tensor, but got list"),
]


@pytest.mark.parametrize("name", list(LOSS_FUNCTIONS))
@pytest.mark.parametrize(("weight", "error", "message"), WEIGHT_ERRORS)
def test_bad_weights_are_named(name: str, weight: Any, error: type, message: str) -> None:
    preds, target, _, _ = _lists()
    with pytest.raises(error, match=message):
        LOSS_FUNCTIONS[name](preds, target, weight=weight)


@pytest.mark.budget
def test_device_side_weight_checks_raise_the_cpu_message(monkeypatch: pytest.MonkeyPatch) -> None:
    preds, target, _, _ = _lists()
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    with pytest.raises(RuntimeError, match="Expected `weight` to be non-negative"):
        lambdarank_loss(preds, target, weight=-torch.ones_like(preds))


def test_padded_weights_are_not_checked_and_count_for_nothing() -> None:
    preds, target, mask, weight = _lists(4)
    bad = torch.where(mask, weight, math.nan)
    for name, fn in LOSS_FUNCTIONS.items():
        expected = fn(preds, target, mask=mask, weight=weight.where(mask, 7.0))
        torch.testing.assert_close(fn(preds, target, mask=mask, weight=bad), expected, msg=name)


# --- click simulation ---------------------------------------------------------------------------


def test_examination_probability_is_the_power_law() -> None:
    positions = torch.tensor([0, 1, 2, 9, -1])
    expected = torch.tensor([1.0, 1 / 2**2, 1 / 3**2, 1 / 10**2, 0.0])
    torch.testing.assert_close(examination_probability(positions, eta=2.0), expected)
    with pytest.raises(ValueError, match="Expected `positions` to be non-negative, or -1"):
        examination_probability(torch.tensor([0, -3]))


def test_position_based_clicks_have_the_models_frequencies() -> None:
    """Each item's click rate over many sessions is theta(position) * gamma(label)."""
    target = torch.tensor([4, 3, 2, 1, 0, 2])
    positions = torch.tensor([0, 1, 2, 3, 4, -1])
    sessions = 40_000
    gen = torch.Generator().manual_seed(0)
    clicks = simulate_clicks(
        target.expand(sessions, -1), positions.expand(sessions, -1), noise=0.1, generator=gen
    )
    gamma = 0.1 + 0.9 * (2.0 ** target.double() - 1) / 15
    theta = examination_probability(positions).double()
    rate = theta * gamma
    sd = (rate * (1 - rate) / sessions).sqrt()
    observed = clicks.double().mean(0)
    assert ((observed - rate).abs() <= 4 * sd + 1e-12).all(), (observed, rate)
    assert observed[-1] == 0  # not shown, never clicked


def test_cascade_clicks_the_first_attractive_item_only() -> None:
    target = torch.tensor([0, 4, 4, 0])
    positions = torch.tensor([3, 2, 0, 1])  # display order: items 2, 3, 1, 0
    clicks = simulate_clicks(
        target, positions, model="cascade", noise=0.0, generator=torch.Generator().manual_seed(2)
    )
    # Item 2 is shown on top and always attractive: the user stops there.
    assert clicks.tolist() == [0.0, 0.0, 1.0, 0.0]
    sessions = 20_000
    target = torch.tensor([2, 2, 2])
    gen = torch.Generator().manual_seed(1)
    clicks = simulate_clicks(
        target.expand(sessions, -1),
        torch.tensor([0, 1, 2]).expand(sessions, -1),
        model="cascade",
        noise=0.0,
        generator=gen,
    )
    assert clicks.sum(-1).max() <= 1
    gamma = 3 / 15
    expected = torch.tensor([gamma, (1 - gamma) * gamma, (1 - gamma) ** 2 * gamma]).double()
    sd = (expected * (1 - expected) / sessions).sqrt()
    assert ((clicks.double().mean(0) - expected).abs() <= 4 * sd).all()


def test_simulation_is_seeded_and_takes_an_examination_table() -> None:
    target = torch.randint(0, 5, (50, 10), generator=torch.Generator().manual_seed(2))
    positions = torch.arange(10).expand(50, -1)

    def draw(seed: int, **kwargs: Any) -> torch.Tensor:
        return simulate_clicks(
            target, positions, generator=torch.Generator().manual_seed(seed), **kwargs
        )

    assert torch.equal(draw(5), draw(5))
    assert not torch.equal(draw(5), draw(6))
    table = examination_probability(torch.arange(10))
    assert torch.equal(draw(5, examination=table), draw(5))
    assert draw(5, examination=torch.zeros(10)).sum() == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"model": "dbn"}, ValueError, "Expected `model` to be one of 'position_based'"),
        ({"noise": 1.5}, ValueError, r"Expected `noise` to be a float in \[0, 1\]"),
        ({"noise": 10**400}, ValueError, r"Expected `noise` to be a float in \[0, 1\]"),
        ({"eta": -1.0}, ValueError, "Expected `eta` to be a non-negative"),
        ({"max_label": 2}, ValueError, r"Expected `target` to be in \[0, 2\] .* found 4"),
        ({"examination": torch.ones(3)}, ValueError, r"`positions` to be in \[0, 3\).* found 4"),
        ({"examination": torch.ones(5) * 2}, ValueError, "probabilities in .* found 2"),
    ],
)
def test_bad_simulation_arguments_are_named(kwargs: Any, error: type, message: str) -> None:
    target = torch.tensor([[0, 4, 1, 2, 3]])
    positions = torch.tensor([[0, 1, 2, 3, 4]])
    with pytest.raises(error, match=message):
        simulate_clicks(target, positions, **kwargs)


# --- counterfactual evaluation ------------------------------------------------------------------


def test_ips_dcg_is_unbiased_for_the_dcg_of_the_attractiveness() -> None:
    """dcg(new scores, clicks / theta, gain="linear") averages to the DCG of gamma(label).

    The logged ranking shows every item (at a random position per session); a new ranking is
    scored from the logged clicks. The IPS sum's exact variance is
    sum_i D_i^2 Var(c_i / theta_i) averaged over positions: the mean of n sessions is within
    4 standard errors of the truth.
    """
    gen = torch.Generator().manual_seed(3)
    length, sessions = 8, 20_000
    target = torch.randint(0, 5, (length,), generator=gen)
    new_scores = torch.randn(length, generator=gen, dtype=torch.float64)
    positions = torch.rand(sessions, length, generator=gen).argsort(-1)
    clicks = simulate_clicks(target.expand(sessions, -1), positions, noise=0.1, generator=gen)
    weight = 1 / examination_probability(positions).double()
    estimates = dcg(new_scores.expand(sessions, -1), clicks.double() * weight, gain="linear")
    gamma = 0.1 + 0.9 * (2.0 ** target.double() - 1) / 15
    truth = float(dcg(new_scores, gamma, gain="linear"))
    # Var(c / theta) for an item shown at a uniform position: E[gamma / theta] - gamma^2.
    discounts = 1 / torch.log2(new_scores.argsort(descending=True).argsort().double() + 2)
    mean_inverse_theta = (torch.arange(length).double() + 1).mean()
    variance = (discounts**2 * (gamma * mean_inverse_theta - gamma**2)).sum()
    standard_error = float((variance / sessions).sqrt())
    assert abs(float(estimates.mean()) - truth) <= 4 * standard_error
    # The naive estimate (clicks as labels) is biased: far outside the same band.
    naive = float(dcg(new_scores.expand(sessions, -1), clicks.double(), gain="linear").mean())
    assert abs(naive - truth) > 20 * standard_error


# --- Unbiased LambdaRank ------------------------------------------------------------------------


def _sessions(
    seed: int, n: int = 5, length: int = 6, positions: int = 6, uneven: bool = False
) -> tuple[Any, ...]:
    """``n`` sessions of ``length`` items shown in random order at the top ``positions``.

    ``uneven``: each session shows its own number of positions (1 to ``positions``), as lists
    of different lengths do.
    """
    gen = torch.Generator().manual_seed(seed)
    preds = torch.randn(n, length, generator=gen, dtype=torch.float64)
    clicks = (torch.rand(n, length, generator=gen) < 0.35).long()
    shown = torch.stack([torch.randperm(length, generator=gen) for _ in range(n)])
    depth = torch.randint(1, positions + 1, (n, 1), generator=gen) if uneven else positions
    shown = torch.where(shown < depth, shown, -1)
    return preds, clicks, shown


@pytest.mark.parametrize(("k", "bias_norm"), [(None, 0.0), (3, 0.0), (None, 2.0), (4, 1.0)])
@pytest.mark.parametrize(
    ("seed", "uneven", "match_exposure"),
    [(0, False, True), (1, True, True), (2, True, False), (3, False, False)],
)
def test_bias_updates_equal_the_papers_formulas(
    k: int | None, bias_norm: float, seed: int, uneven: bool, match_exposure: bool
) -> None:
    preds, clicks, positions = _sessions(seed, n=8, positions=5, uneven=uneven)
    loss_fn = _reference_loss(k, bias_norm, match_exposure)
    _steps_equal_the_reference(
        loss_fn,
        lambda p: loss_fn(p, clicks, positions),
        lambda p, t_plus, t_minus: references.unbiased_lambdarank_step(
            p.tolist(),
            clicks.tolist(),
            positions.tolist(),
            t_plus,
            t_minus,
            k=k,
            bias_norm=bias_norm,
            match_exposure=match_exposure,
        ),
        preds,
    )


def test_matched_exposure_compares_a_position_with_the_top_of_the_lists_that_show_it() -> None:
    """List A shows positions 0-3, list B only 0-1: positions 2-3 compare with A's top alone.

    Each list's own statistics come from the float64 loop reference run on that list alone.
    """
    preds = torch.tensor([[0.0, 1.0, 0.2, -0.4], [0.5, 0.0, 0.3, 0.1]], dtype=torch.float64)
    clicks = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    positions = torch.tensor([[1, 0, 2, 3], [0, 1, -1, -1]])

    def alone(row: int) -> list[list[float]]:
        return references.unbiased_lambdarank_step(
            preds[row : row + 1].tolist(),
            clicks[row : row + 1].tolist(),
            positions[row : row + 1].tolist(),
            [1.0] * 4,
            [1.0] * 4,
        )[1]

    (a_plus, a_minus, _, _), (b_plus, b_minus, _, _) = alone(0), alone(1)
    assert min(a_plus[0], b_plus[0], a_plus[2]) > 0  # (S- needs an unclicked top: not here)
    matched, paper = (
        UnbiasedLambdaRankLoss(
            num_positions=4, bias_norm=0.0, momentum=0.0, match_exposure=m
        ).double()
        for m in (True, False)
    )
    matched(preds, clicks, positions)
    paper(preds, clicks, positions)
    top_plus, top_minus = a_plus[0] + b_plus[0], a_minus[0] + b_minus[0]
    expected = [
        [a + b for a, b in zip(a_plus, b_plus, strict=True)],
        [a + b for a, b in zip(a_minus, b_minus, strict=True)],
        [top_plus, top_plus, a_plus[0], a_plus[0]],
        [top_minus, top_minus, a_minus[0], a_minus[0]],
    ]
    torch.testing.assert_close(matched.statistics, torch.tensor(expected, dtype=torch.float64))
    expected[2], expected[3] = [top_plus] * 4, [top_minus] * 4
    torch.testing.assert_close(paper.statistics, torch.tensor(expected, dtype=torch.float64))
    # Same biases where both lists show the position; deeper, the paper's are smaller.
    torch.testing.assert_close(matched.t_plus[:2], paper.t_plus[:2])
    torch.testing.assert_close(matched.t_plus[2], paper.t_plus[2] * top_plus / a_plus[0])


def _reference_loss(
    k: int | None, bias_norm: float, match_exposure: bool
) -> UnbiasedLambdaRankLoss:
    """The float64 loss whose bias updates are compared with the loop references."""
    return UnbiasedLambdaRankLoss(
        num_positions=5,
        k=k,
        bias_norm=bias_norm,
        momentum=0.0,
        match_exposure=match_exposure,
        reduction="none",
    ).double()


def _steps_equal_the_reference(
    loss_fn: UnbiasedLambdaRankLoss,
    step: Callable[[torch.Tensor], torch.Tensor],
    reference: Callable[..., tuple[list[float], ...]],
    preds: torch.Tensor,
) -> None:
    """Three steps (the biases of one weight the next one's pairs): losses, statistics, biases."""
    t_plus, t_minus = [1.0] * loss_fn.num_positions, [1.0] * loss_fn.num_positions
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        got = step(preds)
        losses, statistics, t_plus, t_minus = reference(preds, t_plus, t_minus)
        torch.testing.assert_close(got, torch.tensor(losses, dtype=torch.float64))
        expected_stats = torch.tensor(statistics, dtype=torch.float64)
        torch.testing.assert_close(loss_fn.statistics, expected_stats)
        torch.testing.assert_close(loss_fn.t_plus, torch.tensor(t_plus, dtype=torch.float64))
        torch.testing.assert_close(loss_fn.t_minus, torch.tensor(t_minus, dtype=torch.float64))
        preds = preds + 0.3 * torch.randn(preds.shape, generator=gen, dtype=preds.dtype)


def test_momentum_discounts_the_summed_statistics_and_eval_mode_freezes_the_biases() -> None:
    loss_fn = UnbiasedLambdaRankLoss(num_positions=6, bias_norm=0.0, momentum=0.75).double()
    batches = [_sessions(seed) for seed in range(3)]
    t_plus, t_minus = [1.0] * 6, [1.0] * 6
    average = torch.zeros(4, 6, dtype=torch.float64)
    for preds, clicks, positions in batches:
        loss_fn(preds, clicks, positions)
        _, statistics, _, _ = references.unbiased_lambdarank_step(
            preds.tolist(), clicks.tolist(), positions.tolist(), t_plus, t_minus
        )
        average = 0.75 * average + torch.tensor(statistics, dtype=torch.float64)
        t_plus = [float(v) for v in torch.where(average[0] > 0, average[0] / average[2], 1)]
        t_minus = [float(v) for v in torch.where(average[1] > 0, average[1] / average[3], 1)]
        torch.testing.assert_close(loss_fn.statistics, average)
    before = {name: value.clone() for name, value in loss_fn.state_dict().items()}
    loss_fn.eval()
    loss_fn(*batches[0])
    for name, value in loss_fn.state_dict().items():
        assert torch.equal(value, before[name]), name


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_summed_statistics_stay_float32_in_a_half_precision_model(dtype: torch.dtype) -> None:
    # momentum=1 sums every step: cast to float16 (`.half()`, Lightning's "16-true") the sums
    # of 1e5 became inf and the next step failed naming `sigma`; in bfloat16 they stop adding.
    loss_fn = UnbiasedLambdaRankLoss(num_positions=6)
    loss_fn.statistics.fill_(1e5)
    model = torch.nn.ModuleDict({"loss": loss_fn}).to(dtype)
    assert loss_fn.statistics.dtype == torch.float32
    assert loss_fn.t_plus.dtype == dtype
    preds, clicks, positions = _sessions(0)
    reference = UnbiasedLambdaRankLoss(num_positions=6)
    reference.statistics.fill_(1e5)
    reference(preds.float(), clicks, positions)
    loss = model["loss"](preds.to(dtype), clicks, positions)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss_fn.statistics, reference.statistics, rtol=1e-2, atol=0)
    assert not torch.equal(loss_fn.statistics, torch.full_like(loss_fn.statistics, 1e5))
    fresh = UnbiasedLambdaRankLoss(num_positions=6)
    fresh.load_state_dict(loss_fn.state_dict())  # and the checkpoint loads in float32
    assert torch.equal(fresh.statistics, loss_fn.statistics)


def test_gradient_is_the_debiased_lambdarank_gradient() -> None:
    """The gradient equals autograd through the reference's debiased loss (float64)."""
    preds, clicks, positions = _sessions(4)
    loss_fn = UnbiasedLambdaRankLoss(
        num_positions=6, bias_norm=0.0, momentum=0.0, reduction="sum"
    ).double()
    loss_fn(preds, clicks, positions)  # learn some biases first
    t_plus, t_minus = loss_fn.t_plus.tolist(), loss_fn.t_minus.tolist()
    leaf = preds.clone().requires_grad_()
    loss_fn(leaf, clicks, positions).backward()
    assert leaf.grad is not None
    step = 1e-6
    for row, col in [(0, 0), (1, 3), (2, 5), (4, 2)]:
        values = []
        for sign in (1, -1):
            moved = preds.clone()
            moved[row, col] += sign * step
            losses = references.unbiased_lambdarank_step(
                moved.tolist(), clicks.tolist(), positions.tolist(), t_plus, t_minus
            )[0]
            values.append(sum(losses))
        numeric = (values[0] - values[1]) / (2 * step)
        assert leaf.grad[row, col].item() == pytest.approx(numeric, rel=1e-5, abs=1e-8)


def test_state_dict_checkpoints_the_biases() -> None:
    loss_fn = UnbiasedLambdaRankLoss(num_positions=6)
    for seed in range(2):
        preds, clicks, positions = _sessions(seed)
        loss_fn(preds.float(), clicks, positions)
    restored = UnbiasedLambdaRankLoss(num_positions=6)
    restored.load_state_dict(loss_fn.state_dict())
    assert set(loss_fn.state_dict()) == {"t_plus", "t_minus", "statistics"}
    preds, clicks, positions = _sessions(9)
    assert torch.equal(
        restored(preds.float(), clicks, positions), loss_fn(preds.float(), clicks, positions)
    )
    assert torch.equal(restored.t_plus, loss_fn.t_plus)


def test_unbiased_loss_with_unit_biases_is_lambdarank_on_the_shown_items() -> None:
    preds, clicks, positions = _sessions(5)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=6, k=4)
    expected = lambdarank_loss(preds, clicks, k=4, mask=positions >= 0)
    assert torch.equal(loss_fn(preds, clicks, positions), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("length", [4, 5])
def test_aggregated_ranks_half_precision_scores_as_float32(dtype: torch.dtype, length: int) -> None:
    # Half-precision scores are ranked by their float32 keys (their bits read as int32 gave
    # keys of another shape), and the loss is computed in float32, as `forward` computes it:
    # the float32 loss of the same numbers.
    gen = torch.Generator().manual_seed(5)
    preds = torch.randn(3, length, generator=gen).to(dtype)
    views = (torch.rand(3, length, length, generator=gen) + 0.5).to(dtype)
    clicks = (views.float() * torch.rand(3, length, length, generator=gen)).to(dtype)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=length).eval()
    expected = loss_fn.aggregated(preds.float(), clicks.float(), views.float())
    got = loss_fn.to(dtype).aggregated(preds, clicks, views)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"positions": torch.full((5, 6), 6)},
            ValueError,
            r"`positions` to be in \[0, 6\).*found 6",
        ),
        ({"positions": torch.full((5, 6), -2)}, ValueError, "found -2"),
        ({"positions": torch.zeros(5, 6)}, TypeError, "`positions` to be an integer tensor"),
        ({"positions": torch.zeros(5, 5, dtype=torch.long)}, ValueError, "`positions` to have"),
        ({"clicks": torch.full((5, 6), 2)}, ValueError, "`clicks` to be 0 or 1 .* found 2"),
        ({"clicks": torch.full((5, 6), 0.5)}, ValueError, "`clicks` to be 0 or 1 .* found 0.5"),
        ({"clicks": torch.zeros(5, 5)}, ValueError, "`preds` and `clicks` to have the same shape"),
    ],
)
def test_bad_click_input_is_named(change: dict[str, Any], error: type, message: str) -> None:
    preds, clicks, positions = _sessions(6)
    arguments = {"preds": preds, "clicks": clicks, "positions": positions, **change}
    with pytest.raises(error, match=message):
        UnbiasedLambdaRankLoss(num_positions=6)(**arguments)


def test_padding_and_unshown_items_are_not_checked() -> None:
    preds, clicks, positions = _sessions(7)
    mask = torch.ones_like(clicks, dtype=torch.bool)
    mask[:, -1] = False
    bad_clicks = clicks.clone()
    bad_clicks[:, -1] = -1
    bad_positions = torch.where(mask, positions, 99)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=6, ignore_index=-1)
    expected = UnbiasedLambdaRankLoss(num_positions=6)(preds, clicks, positions, mask)
    assert torch.equal(loss_fn(preds, bad_clicks, bad_positions), expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_positions": 0}, "Expected `num_positions` to be a positive int, but got 0"),
        ({"num_positions": 3, "momentum": 1.5}, r"`momentum` to be in \[0, 1\]"),
        ({"num_positions": 3, "bias_norm": -1.0}, "`bias_norm` to be a non-negative"),
        ({"num_positions": 3, "sigma": 0}, "`sigma` to be a positive"),
    ],
)
def test_bad_hyper_parameters_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        UnbiasedLambdaRankLoss(**kwargs)


def test_unchecked_valid_input_never_crashes() -> None:
    """Valid input without the checks: the checked step's loss and learnt biases, finite."""
    for seed in range(5):
        preds, clicks, positions = _sessions(seed, n=3, length=4, positions=4)
        loss_fn = UnbiasedLambdaRankLoss(num_positions=4, validate_args=False)
        checked_fn = UnbiasedLambdaRankLoss(num_positions=4)
        loss = loss_fn(preds.float(), clicks, positions)
        assert loss.isfinite()
        assert torch.equal(loss, checked_fn(preds.float(), clicks, positions))
        assert torch.equal(loss_fn.t_plus, checked_fn.t_plus)
        assert torch.equal(loss_fn.t_minus, checked_fn.t_minus)
    empty = UnbiasedLambdaRankLoss(num_positions=2)(
        torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.long)
    )
    assert empty == 0


# --- host read-backs ----------------------------------------------------------------------------


def _weighted_step(validate: bool) -> torch.Tensor:
    preds, target, mask, weight = _lists(8)
    leaf = preds.float().requires_grad_()
    LambdaRankLoss(k=5, validate_args=validate)(leaf, target, mask, weight=weight).backward()
    assert leaf.grad is not None
    return leaf.grad


def _unbiased_step(validate: bool) -> torch.Tensor:
    preds, clicks, positions = _sessions(8)
    leaf = preds.float().requires_grad_()
    loss_fn = UnbiasedLambdaRankLoss(num_positions=6, validate_args=validate)
    loss_fn(leaf, clicks, positions).backward()
    assert leaf.grad is not None
    return torch.cat([leaf.grad.flatten(), loss_fn.t_plus, loss_fn.t_minus])


def _aggregated_step(validate: bool) -> torch.Tensor:
    preds, clicks, views = _counts(8)
    leaf = preds.float().requires_grad_()
    mask = torch.ones(leaf.shape, dtype=torch.bool)
    mask[0, -1] = False
    loss_fn = UnbiasedLambdaRankLoss(num_positions=5, validate_args=validate)
    loss_fn.aggregated(leaf, clicks.float(), views.float(), mask).backward()
    assert leaf.grad is not None
    return torch.cat([leaf.grad.flatten(), loss_fn.t_plus, loss_fn.t_minus])


@pytest.mark.parametrize(
    "step",
    [_weighted_step, _unbiased_step, _aggregated_step],
    ids=["weighted", "unbiased", "aggregated"],
)
@pytest.mark.parametrize("validate", [True, False], ids=["checked", "unchecked"])
@pytest.mark.budget
def test_steps_read_back_once_on_the_cpu_and_never_on_an_accelerator(
    step: Callable[[bool], torch.Tensor], validate: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    with count_host_reads() as reads:
        expected = step(validate)
    assert len(reads) <= (1 if validate else 0), reads
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    with count_host_reads() as reads:
        got = step(validate)
    assert reads == []
    torch.testing.assert_close(got, expected)


# --- DDP ----------------------------------------------------------------------------------------

WORLD_SIZE = 2


def _ddp_batches() -> list[tuple[torch.Tensor, ...]]:
    return [
        tuple(t.float() if t.is_floating_point() else t for t in _sessions(s, n=8, uneven=True))
        for s in range(4)
    ]


def _ddp_worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(
        "gloo", rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=60)
    )
    loss_fn = UnbiasedLambdaRankLoss(num_positions=6, momentum=0.5)
    for batch in _ddp_batches():
        half = slice(0, 3) if rank == 0 else slice(3, 8)  # uneven halves
        loss_fn(*(t[half] for t in batch))
    torch.save(loss_fn.state_dict(), Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def test_biases_under_ddp_equal_one_process(tmp_path: Path) -> None:
    ranks = run_ranks(_ddp_worker, WORLD_SIZE, tmp_path)
    alone = UnbiasedLambdaRankLoss(num_positions=6, momentum=0.5)
    for batch in _ddp_batches():
        alone(*batch)
    for state in ranks:
        for name, value in alone.state_dict().items():
            torch.testing.assert_close(state[name], value, rtol=1e-5, atol=1e-7)
    assert not torch.equal(alone.t_plus, torch.ones(6))


# --- torch.compile ------------------------------------------------------------------------------


@needs_torch_2_13_to_compile_losses
@pytest.mark.parametrize("validate_args", [False, True])
def test_compiled_debiased_step_equals_eager(validate_args: bool) -> None:
    """Two list lengths and uneven exposure, dynamic shapes: values, gradients, learnt biases.

    With the checks on too (device-side assertions under compile).
    """
    eager = UnbiasedLambdaRankLoss(num_positions=8, validate_args=validate_args)
    module = UnbiasedLambdaRankLoss(num_positions=8, validate_args=validate_args)
    compiled = torch.compile(module, dynamic=True)
    for length in (6, 8):
        preds, clicks, positions = _sessions(10 + length, length=length, positions=8, uneven=True)
        expected = _loss_and_grad(eager, preds.float(), clicks, positions)
        got = _loss_and_grad(compiled, preds.float(), clicks, positions)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(module.t_plus, eager.t_plus)
        torch.testing.assert_close(module.statistics, eager.statistics)


def test_int32_positions_and_bool_clicks_give_the_same_step() -> None:
    preds, clicks, positions = _sessions(11)
    expected_fn, got_fn = (UnbiasedLambdaRankLoss(num_positions=6) for _ in range(2))
    expected = expected_fn(preds, clicks, positions)
    got = got_fn(preds, clicks.bool(), positions.int())
    assert torch.equal(got, expected)
    assert torch.equal(got_fn.statistics, expected_fn.statistics)


# --- sessions summed per item and position (UnbiasedLambdaRankLoss.aggregated) ----------------


def _counts(seed: int, n: int = 4, length: int = 5, positions: int = 5) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(seed)
    preds = torch.randn(n, length, generator=gen, dtype=torch.float64)
    views = torch.randint(0, 4, (n, length, positions), generator=gen).double()
    clicks = torch.floor(
        views * torch.rand(n, length, positions, generator=gen, dtype=torch.float64)
    )
    return preds, clicks, views


@pytest.mark.parametrize(("k", "bias_norm"), [(None, 0.0), (3, 1.0), (None, 2.0)])
@pytest.mark.parametrize(("seed", "match_exposure"), [(0, True), (1, True), (2, False)])
def test_aggregated_updates_equal_the_loop_reference(
    k: int | None, bias_norm: float, seed: int, match_exposure: bool
) -> None:
    preds, clicks, views = _counts(seed)
    loss_fn = _reference_loss(k, bias_norm, match_exposure)
    _steps_equal_the_reference(
        loss_fn,
        lambda p: loss_fn.aggregated(p, clicks, views),
        lambda p, t_plus, t_minus: references.aggregated_unbiased_lambdarank_step(
            p.tolist(),
            clicks.tolist(),
            views.tolist(),
            t_plus,
            t_minus,
            k=k,
            bias_norm=bias_norm,
            match_exposure=match_exposure,
        ),
        preds,
    )


@pytest.mark.parametrize("k", [None, 3])
def test_aggregated_on_one_session_is_forward(k: int | None) -> None:
    """One-hot counts times 1 / sqrt(ideal DCG of the clicks): the per-session loss; one-hot
    counts: its statistics and biases (they count each click alike, without LambdaRank's 1 / Z)."""
    preds, clicks, positions = _sessions(4, n=6, length=6, positions=6)
    positions = positions.abs()  # every item shown
    per_session, summed = (
        UnbiasedLambdaRankLoss(num_positions=6, k=k, bias_norm=1.0, momentum=0.5).double()
        for _ in range(2)
    )
    cut = 6 if k is None else k
    ideal = torch.cumsum(1 / torch.log2(torch.arange(2, 8, dtype=torch.float64)), 0)
    count = clicks.sum(-1).clamp(max=cut)
    scale = torch.where(count > 0, ideal[(count - 1).clamp(min=0)].rsqrt(), 0)[:, None, None]
    one_hot = torch.nn.functional.one_hot(positions, 6).double()
    views = one_hot * scale
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        expected = _loss_and_grad(per_session, preds, clicks, positions)
        got = _loss_and_grad(summed.eval().aggregated, preds, clicks[..., None] * views, views)
        summed.train().aggregated(preds, clicks[..., None] * one_hot, one_hot)  # the update
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(summed.statistics, per_session.statistics)
        torch.testing.assert_close(summed.t_minus, per_session.t_minus)
        preds = preds + 0.3 * torch.randn(preds.shape, generator=gen, dtype=preds.dtype)


def test_aggregated_on_mean_counts_is_the_mean_session_loss() -> None:
    """Position-based clicks: the product of two items' means is the mean of their pairs' weights.

    2,000 sessions of one list of 6 items shown in random order. The per-session loss times the
    ideal DCG of the session's clicks (the pairs' losses without LambdaRank's normalisation),
    averaged over the sessions, against `aggregated` on the per-session means of the counts:
    they differ by the covariance of two means, O(1 / S), and by the small dependence of two
    items' positions within a session.
    """
    sessions, length = 2000, 6
    gen = torch.Generator().manual_seed(3)
    labels = torch.tensor([4, 3, 2, 1, 0, 0]).expand(sessions, -1)
    positions = torch.rand(sessions, length, generator=gen).argsort(-1).argsort(-1)
    clicks = simulate_clicks(labels, positions, generator=gen)
    preds = torch.linspace(1.0, -1.0, length, dtype=torch.float64)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=length, reduction="sum").double().eval()
    loss_fn.t_plus.copy_(torch.linspace(1.0, 0.3, length))  # any biases: they enter both alike
    ideal = torch.cumsum(1 / torch.log2(torch.arange(2, length + 2, dtype=torch.float64)), 0)
    count = clicks.sum(-1).long()
    none_fn = UnbiasedLambdaRankLoss(num_positions=length, reduction="none").double().eval()
    none_fn.load_state_dict(loss_fn.state_dict())
    session_losses = none_fn(preds.expand(sessions, -1), clicks, positions)
    expected = (session_losses * ideal[(count - 1).clamp(min=0)]).mean()
    shown_at = torch.nn.functional.one_hot(positions, length).double()
    views = shown_at.mean(0)
    clicked = (shown_at * clicks[..., None]).mean(0)
    got = loss_fn.aggregated(preds, clicked, views)
    assert got.item() == pytest.approx(expected.item(), rel=0.03)
    # Not a tautology: the same counts with their clicks spread evenly over the positions
    # (the position information dropped) give another loss.
    spread = clicked.sum(-1, keepdim=True).expand(-1, length) / length
    assert loss_fn.aggregated(preds, spread, views).item() != pytest.approx(
        expected.item(), rel=0.03
    )


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"clicks": torch.zeros(2, 3, 3, dtype=torch.long)}, TypeError, "`clicks`"),
        (
            {"views": torch.ones(2, 3, 4)},
            ValueError,
            "`views` to have the shape of `preds` and `num_positions` (2, 3, 3)",
        ),
        ({"clicks": torch.full((2, 3, 3), 2.0)}, ValueError, "at most `views`"),
        ({"views": torch.full((2, 3, 3), torch.inf)}, ValueError, "finite"),
        ({"clicks": torch.full((2, 3, 3), torch.nan)}, ValueError, "no NaN"),
    ],
)
def test_bad_aggregated_input_is_named(change: dict[str, Any], error: type, message: str) -> None:
    loss_fn = UnbiasedLambdaRankLoss(num_positions=3)
    tensors = {
        "preds": torch.zeros(2, 3),
        "clicks": torch.zeros(2, 3, 3),
        "views": torch.ones(2, 3, 3),
    }
    tensors.update(change)
    with pytest.raises(error, match=re.escape(message)):
        loss_fn.aggregated(**tensors)


def test_learnt_click_ratios_approach_the_examination_ratios_by_default() -> None:
    """Per-session clicks of the position-based model (examination 1 / (position + 1)) read a
    batch at a time, a uniformly random logger and a fixed ranker: at its defaults the unshrunk
    estimate ``statistics[0] / statistics[2]`` is within 20% of theta_i / theta_0 at every
    position (a 0.9 moving average of the same batches was 24% off)."""
    gen = torch.Generator().manual_seed(0)
    n, length = 64, 10
    loss_fn = UnbiasedLambdaRankLoss(num_positions=length)
    for _ in range(300):
        labels = torch.randint(0, 5, (n, length), generator=gen)
        preds = labels + torch.randn(n, length, generator=gen)
        positions = torch.rand(n, length, generator=gen).argsort(-1)
        loss_fn(preds, simulate_clicks(labels, positions, generator=gen), positions)
    learnt = loss_fn.statistics[0] / loss_fn.statistics[2]
    truth = examination_probability(torch.arange(length))
    assert (learnt / truth - 1).abs().max() <= 0.2
