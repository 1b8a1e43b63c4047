"""SoftmaxLoss / XENDCGLoss: loop references of their papers' formulas, peers' formulas (Rax,
TF-Ranking, allRank), gradcheck, padding, weights, options, compile, half precision, Lightning."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torch_ndcg
from tests import references as ref
from tests.conftest import needs_torch_2_13_to_compile_losses
from tests.host_reads import count_host_reads
from torch_ndcg import SoftmaxLoss, XENDCGLoss, ndcg, softmax_loss, xe_ndcg_loss

BOTH = [softmax_loss, xe_ndcg_loss]


def batch(
    n: int = 4, length: int = 7, *, seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores, graded labels 0-3 (row 1 all 0), a mask with padding at the end of some lists."""
    gen = torch.Generator().manual_seed(seed)
    preds = torch.randn(n, length, generator=gen, dtype=dtype)
    target = torch.randint(0, 4, (n, length), generator=gen)
    target[1:2] = 0
    lengths = torch.randint(1, length + 1, (n,), generator=gen)
    lengths[0] = length
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return preds, target, mask


def step(function: Any, preds: torch.Tensor, target: torch.Tensor, **options: Any) -> Any:
    """The per-list losses and the gradient of their sum."""
    leaf = preds.clone().requires_grad_()
    loss = function(leaf, target, reduction="none", **options)
    loss.sum().backward()
    return loss.detach(), leaf.grad


def noise_for(preds: torch.Tensor, seed: int = 5) -> torch.Tensor:
    return torch.rand(preds.shape, generator=torch.Generator().manual_seed(seed), dtype=preds.dtype)


# --- Against loop references of the papers' formulas -------------------------------------------


@pytest.mark.parametrize("gain", ["exponential", "linear", torch.exp])
@pytest.mark.parametrize("padding", ["mask", "ignore_index", None])
@pytest.mark.parametrize("weighted", [False, True])
def test_softmax_loss_equals_the_loop_reference(gain: Any, padding: Any, weighted: bool) -> None:
    preds, target, mask = batch(seed=1)
    real = mask if padding else torch.ones_like(mask)
    weight = torch.rand(preds.shape, generator=torch.Generator().manual_seed(2), dtype=preds.dtype)
    options: dict[str, Any] = {"gain": gain, "weight": weight if weighted else None}
    if padding == "mask":
        options["mask"] = mask
    elif padding == "ignore_index":
        target = torch.where(mask, target, -1)
        options["ignore_index"] = -1
    loss, grad = step(softmax_loss, preds, target, **options)
    reference_gain = math.exp if gain is torch.exp else gain
    targets = ref.normalised_gains(target.tolist(), real.tolist(), reference_gain)
    expected, expected_grad = ref.cross_entropy_lists(
        preds.tolist(), targets, real.tolist(), weight.tolist() if weighted else None
    )
    torch.testing.assert_close(loss, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=torch.float64))


@pytest.mark.parametrize("padding", ["mask", None])
@pytest.mark.parametrize("weighted", [False, True])
def test_xe_ndcg_equals_the_papers_formula(padding: Any, weighted: bool) -> None:
    """Bruch (WWW 2021): phi = 2^y - gamma, normalised; label-0 items take part."""
    preds, target, mask = batch(seed=3)
    real = mask if padding else torch.ones_like(mask)
    gamma = noise_for(preds)
    weight = torch.rand(preds.shape, generator=torch.Generator().manual_seed(4), dtype=preds.dtype)
    loss, grad = step(
        xe_ndcg_loss,
        preds,
        target,
        noise=gamma,
        mask=mask if padding else None,
        weight=weight if weighted else None,
    )
    targets = []
    for labels, keep, noise in zip(target.tolist(), real.tolist(), gamma.tolist(), strict=True):
        phi = [2.0**y - g if k else 0.0 for y, k, g in zip(labels, keep, noise, strict=True)]
        relevant = any(y > 0 for y, k in zip(labels, keep, strict=True) if k)
        targets.append([v / sum(phi) if relevant else 0.0 for v in phi])
    expected, expected_grad = ref.cross_entropy_lists(
        preds.tolist(), targets, real.tolist(), weight.tolist() if weighted else None
    )
    assert expected[1] == 0  # the list without a relevant item counts for nothing
    torch.testing.assert_close(loss, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=torch.float64))


def test_xe_ndcg_with_another_gain_equals_the_loop_reference() -> None:
    preds, target, mask = batch(seed=6)
    gamma = noise_for(preds, seed=7)
    loss, grad = step(xe_ndcg_loss, preds, target, noise=gamma, mask=mask, gain="linear")
    targets = ref.normalised_gains(target.tolist(), mask.tolist(), "linear", gamma.tolist())
    expected, expected_grad = ref.cross_entropy_lists(preds.tolist(), targets, mask.tolist())
    torch.testing.assert_close(loss, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=torch.float64))


def test_gradcheck_in_float64() -> None:
    preds, target, mask = batch(3, 5, seed=8)
    leaf = preds.clone().requires_grad_()
    weight = torch.rand(preds.shape, generator=torch.Generator().manual_seed(9), dtype=preds.dtype)
    gamma = noise_for(preds, seed=10)
    assert torch.autograd.gradcheck(
        lambda p: softmax_loss(p, target, mask=mask, weight=weight, reduction="none"), (leaf,)
    )
    assert torch.autograd.gradcheck(
        lambda p: xe_ndcg_loss(p, target, mask=mask, noise=gamma, weight=weight), (leaf,)
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("masked", [False, True])
def test_second_derivative_in_float64(reduction: str, masked: bool) -> None:
    """Plain autograd: the Hessian-vector products are right too (gradgradcheck), with and
    without padding, under every reduction."""
    preds, target, mask = batch(3, 5, seed=11)
    leaf = preds.clone().requires_grad_()
    weight = torch.rand(preds.shape, generator=torch.Generator().manual_seed(12), dtype=preds.dtype)
    gamma = noise_for(preds, seed=13)
    real = mask if masked else None
    assert torch.autograd.gradgradcheck(
        lambda p: softmax_loss(p, target, mask=real, weight=weight, reduction=reduction), (leaf,)
    )
    assert torch.autograd.gradgradcheck(
        lambda p: xe_ndcg_loss(p, target, mask=real, noise=gamma, reduction=reduction), (leaf,)
    )


# --- Peers' formulas under the parity recipes ---------------------------------------------------


def peer_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Float64 scores, graded labels with a positive one in every list, padding at the ends."""
    preds, target, mask = batch(5, 8, seed=seed)
    target[:, 0] = torch.arange(1, 6)  # every list has a relevant (real) item
    return preds, target, mask


@pytest.mark.parametrize("seed", range(3))
def test_softmax_equals_rax_normalised_labels(seed: int) -> None:
    """``rax.softmax_loss(s, y, where=m, label_fn=rax.utils.normalize_probabilities)`` (its
    mean) is ``gain="linear"`` on lists with a relevant item."""
    preds, target, mask = peer_batch(seed)
    got = softmax_loss(preds, target, mask=mask, gain="linear")
    expected = ref.rax_softmax_loss_normalized(preds.tolist(), target.tolist(), mask.tolist())
    assert got.item() == pytest.approx(expected, abs=1e-6)
    # Where a list has no relevant item Rax's target is uniform (a positive loss); ours is 0.
    target[2] = 0
    rax_value = ref.rax_softmax_loss_normalized(preds.tolist(), target.tolist(), mask.tolist())
    assert softmax_loss(preds, target, mask=mask, gain="linear").item() != pytest.approx(rax_value)


def test_softmax_equals_rax_itself() -> None:
    rax = pytest.importorskip("rax")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import numpy as np

    preds, target, mask = peer_batch(11)
    value = rax.softmax_loss(
        np.asarray(preds),
        np.asarray(target, dtype=np.float64),
        where=np.asarray(mask),
        label_fn=rax.utils.normalize_probabilities,
    )
    expected = float(value)
    assert softmax_loss(preds, target, mask=mask, gain="linear").item() == pytest.approx(
        expected, abs=1e-6
    )
    assert expected == pytest.approx(
        ref.rax_softmax_loss_normalized(preds.tolist(), target.tolist(), mask.tolist()), abs=1e-9
    )


@pytest.mark.parametrize("seed", range(3))
def test_softmax_equals_tf_rankings_softmax_loss(seed: int) -> None:
    """TF-Ranking weighs each list by its label sum ``S`` (``SUM_BY_NONZERO_WEIGHTS``): ours
    with ``gain="linear"`` and ``weight=S`` on each item. A list of zeros weighs 0 in both."""
    preds, target, mask = peer_batch(seed)
    target[3, 1:] = 0
    target[3, 0] = 0  # no relevant item: weight 0 in TF-Ranking, not counted here
    padded = torch.where(mask, target, -1)
    sums = torch.where(mask, target, 0).sum(-1, keepdim=True).double().expand_as(preds)
    got = softmax_loss(preds, padded, gain="linear", ignore_index=-1, weight=sums)
    expected = ref.tf_ranking_softmax_loss(padded.tolist(), preds.tolist())
    assert got.item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_softmax_equals_allranks_list_net(seed: int) -> None:
    """allRank's ``listNet`` (target: softmax of the labels, eps 1e-10 in the log, mean over
    the lists) is ``gain=torch.exp`` with ``ignore_index=-1``."""
    preds, target, mask = peer_batch(seed)
    padded = torch.where(mask, target, -1)
    got = softmax_loss(preds, padded, gain=torch.exp, ignore_index=-1)
    expected = ref.allrank_list_net(preds.tolist(), padded.tolist())
    assert got.item() == pytest.approx(expected, abs=1e-6)


# --- Behaviour -----------------------------------------------------------------------------------


@pytest.mark.parametrize("function", BOTH)
def test_padding_equals_dropping_the_items(function: Any) -> None:
    preds, target, _ = batch(1, 8, seed=12)
    mask = torch.tensor([[True, False, True, True, False, True, True, True]])
    gamma = noise_for(preds)
    extra = {"noise": gamma} if function is xe_ndcg_loss else {}
    full = torch.where(mask, preds, float("nan")).requires_grad_()
    loss = function(full, target, mask=mask, **extra)
    loss.backward()
    short = preds[mask][None].clone().requires_grad_()
    short_extra = {"noise": gamma[mask][None]} if extra else {}
    expected = function(short, target[mask][None], **short_extra)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    assert full.grad is not None
    assert short.grad is not None
    torch.testing.assert_close(full.grad[mask], short.grad[0])
    assert (full.grad[~mask] == 0).all()


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nothing_to_rank_gives_zero_loss_and_zero_gradient(function: Any, reduction: str) -> None:
    preds = torch.randn(3, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
    cases = [
        (torch.zeros(3, 5, dtype=torch.long), None),
        (torch.full((3, 5), -1), None),
        (torch.ones(3, 5, dtype=torch.long), torch.zeros(3, 5, dtype=torch.bool)),
    ]
    for target, mask in cases:
        preds.grad = None
        loss = function(preds, target, mask=mask, ignore_index=-1, reduction=reduction)
        loss.backward()
        assert loss.item() == 0
        assert preds.grad is not None
        assert (preds.grad == 0).all()


@pytest.mark.parametrize("function", BOTH)
def test_reductions_and_shapes(function: Any) -> None:
    preds, target, mask = batch(4, 6, seed=13)
    extra = {"noise": noise_for(preds)} if function is xe_ndcg_loss else {}
    per_list = function(preds, target, mask=mask, reduction="none", **extra)
    assert per_list.shape == (4,)
    assert per_list[1].item() == 0  # no relevant item
    assert (per_list[[0, 2, 3]] > 0).all()
    total = function(preds, target, mask=mask, reduction="sum", **extra)
    torch.testing.assert_close(total, per_list.sum())
    torch.testing.assert_close(function(preds, target, mask=mask, **extra), per_list.sum() / 3)
    extra = {"noise": extra["noise"].reshape(2, 2, 6)} if extra else {}
    leading = function(preds.reshape(2, 2, 6), target.reshape(2, 2, 6), reduction="none", **extra)
    assert leading.shape == (2, 2)
    one_extra = {"noise": extra["noise"][0, 0]} if extra else {}
    assert function(preds[0], target[0], reduction="none", **one_extra).shape == ()


def test_weight_scales_the_terms_and_does_not_cancel_on_one_click() -> None:
    """Inverse-propensity weights: a list with one click weighted 3 counts 3 times (Rax and
    TF-Ranking normalise the weighted labels, which would give the unweighted loss back)."""
    preds = torch.tensor([[0.5, 1.0, -0.2]], dtype=torch.float64)
    clicks = torch.tensor([[1, 0, 0]])
    plain = softmax_loss(preds, clicks)
    weighted = softmax_loss(preds, clicks, weight=torch.full((1, 3), 3.0, dtype=torch.float64))
    torch.testing.assert_close(weighted, 3 * plain)
    only_clicked = torch.tensor([[3.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(softmax_loss(preds, clicks, weight=only_clicked), 3 * plain)


def test_xe_ndcg_noise_from_a_generator_is_seedable() -> None:
    preds, target, mask = batch(seed=14)

    def drawn(seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return xe_ndcg_loss(preds, target, mask=mask, generator=gen, reduction="none")

    torch.testing.assert_close(drawn(0), drawn(0))
    assert not torch.equal(drawn(0), drawn(1))
    module = XENDCGLoss(reduction="none")
    torch.testing.assert_close(
        module(preds, target, mask, generator=torch.Generator().manual_seed(0)), drawn(0)
    )
    values = torch.stack([drawn(seed) for seed in range(20)])
    assert torch.isfinite(values).all()
    assert (values[:, [0, 2, 3]] > 0).all()
    assert (values[:, 1] == 0).all()
    # Over draws the losses vary: the noise is drawn at every call without a generator.
    default_draws = {xe_ndcg_loss(preds, target, mask=mask).item() for _ in range(3)}
    assert len(default_draws) == 3


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_xe_ndcg_draws_the_noise_torch_rand_draws_from_the_generator(layout: str) -> None:
    # The noise drawn from a generator is `torch.rand(preds.shape, generator=...)`, in the
    # scores' dtype, whatever the scores' strides: passing it as `noise` gives the same loss.
    preds, target = torch.randn(6, 9, dtype=torch.float64), torch.randint(0, 4, (6, 9))
    if layout == "transposed":
        preds, target = preds.T.contiguous().T, target.T.contiguous().T
    assert preds.is_contiguous() == (layout == "contiguous")
    noise = torch.rand(preds.shape, generator=torch.Generator().manual_seed(5), dtype=preds.dtype)
    for reduction in ("none", "mean"):
        drawn = xe_ndcg_loss(
            preds, target, generator=torch.Generator().manual_seed(5), reduction=reduction
        )
        given = xe_ndcg_loss(preds, target, noise=noise, reduction=reduction)
        torch.testing.assert_close(drawn, given, rtol=1e-12, atol=1e-12)


def test_xe_ndcg_noise_of_one_or_zero_gives_the_bounds() -> None:
    """gamma = 1 gives phi = G (the softmax loss's target); gamma = 0 gives G + 1."""
    preds, target, mask = batch(seed=15)
    torch.testing.assert_close(
        xe_ndcg_loss(preds, target, mask=mask, noise=torch.ones_like(preds)),
        softmax_loss(preds, target, mask=mask),
    )
    shifted = xe_ndcg_loss(
        preds, target, mask=mask, noise=torch.zeros_like(preds), reduction="none"
    )
    plus_one = softmax_loss(preds, target, mask=mask, gain=lambda y: 2.0**y, reduction="none")
    torch.testing.assert_close(shifted[[0, 2, 3]], plus_one[[0, 2, 3]])
    assert shifted[1] == 0 < plus_one[1]  # G + 1 > 0 everywhere; XE-NDCG counts G's lists


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("largest", [3, 30])
def test_float32_gains_of_small_integer_labels_equal_the_float64_path(
    function: Any, largest: int
) -> None:
    """A checked plain float32 batch of small integer labels computes its gains in float32: the
    same numbers as float labels (float64 gains), unchecked input and the float64 formula. Label
    30's gain is past what float32 holds exactly: that batch keeps float64 gains."""
    gen = torch.Generator().manual_seed(21)
    preds = torch.randn(3, 300, generator=gen)
    target = torch.randint(0, largest + 1, (3, 300), generator=gen)
    target[:, 0] = largest

    def loss(labels: torch.Tensor, **options: Any) -> torch.Tensor:
        if function is xe_ndcg_loss:
            options["generator"] = torch.Generator().manual_seed(3)
        return function(preds, labels, reduction="none", **options)

    ours = loss(target)
    torch.testing.assert_close(ours, loss(target.float()), rtol=1e-6, atol=0)
    torch.testing.assert_close(ours, loss(target, validate_args=False), rtol=1e-6, atol=0)
    noise = torch.rand(preds.shape, generator=torch.Generator().manual_seed(3))
    extra = {"noise": noise.double()} if function is xe_ndcg_loss else {}
    exact = function(preds.double(), target, reduction="none", **extra)
    torch.testing.assert_close(ours.double(), exact, rtol=2e-6, atol=0)


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("validate_args", [True, False])
def test_the_mean_of_gains_near_the_largest_float_stays_finite(
    function: Any, validate_args: bool
) -> None:
    """Label 1022's gain, 2^1022 - 1, sums to float64's largest decade: the mean over 8 lists
    divides each ratio (at most 1), never the sum times 8 (inf, which made the loss 0)."""
    preds = torch.tensor([[0.0, 1.0]] * 8, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([[1022, 0]] * 8)
    extra = {"noise": torch.full((8, 2), 0.5)} if function is xe_ndcg_loss else {}
    loss = function(preds, target, validate_args=validate_args, **extra)
    # The target is (1, 0) to float64's precision: -log softmax = log(1 + e).
    torch.testing.assert_close(loss, torch.tensor(math.log1p(math.e), dtype=torch.float64))
    loss.backward()
    assert preds.grad is not None
    expected = torch.tensor([-1.0, 1.0], dtype=torch.float64) / (1 + math.exp(-1)) / 8
    torch.testing.assert_close(preds.grad, expected.expand(8, -1))


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_are_computed_in_float32(function: Any, dtype: torch.dtype) -> None:
    preds, target, mask = batch(seed=16, dtype=torch.float32)
    extra = {"noise": noise_for(preds).to(dtype)} if function is xe_ndcg_loss else {}
    half = preds.to(dtype).requires_grad_()
    loss = function(half, target, mask=mask, **extra)
    assert loss.dtype == torch.float32
    loss.backward()
    assert half.grad is not None
    assert half.grad.dtype == dtype
    reference = half.detach().float().requires_grad_()
    expected = function(reference, target, mask=mask, **extra)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    assert reference.grad is not None
    torch.testing.assert_close(half.grad, reference.grad.to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("function", BOTH)
def test_extreme_scores_stay_finite(function: Any) -> None:
    preds = torch.tensor([[1e4, -1e4, 0.0, 3.0]], requires_grad=True)
    loss = function(preds, torch.tensor([[0, 3, 1, 0]]))
    loss.backward()
    assert torch.isfinite(loss)
    assert preds.grad is not None
    assert torch.isfinite(preds.grad).all()


def test_module_equals_function_and_shows_its_options() -> None:
    preds, target, mask = batch(seed=17)
    target = torch.where(mask, target, -1)
    loss_fn = SoftmaxLoss(gain="linear", ignore_index=-1, reduction="none")
    expected = softmax_loss(preds, target, gain="linear", mask=mask, reduction="none")
    torch.testing.assert_close(loss_fn(preds, target), expected)
    assert repr(loss_fn) == "SoftmaxLoss(gain='linear')"
    assert loss_fn.k is None
    assert loss_fn.discount is None
    loss_fn.gain = "exponential"
    torch.testing.assert_close(
        loss_fn(preds, target), softmax_loss(preds, target, mask=mask, reduction="none")
    )
    with pytest.raises(ValueError, match=r"`reduction` to be one of"):
        loss_fn.reduction = "max"
    gamma = noise_for(preds)
    xe = XENDCGLoss(ignore_index=-1)
    torch.testing.assert_close(
        xe(preds, target, noise=gamma), xe_ndcg_loss(preds, target, mask=mask, noise=gamma)
    )
    assert repr(xe) == "XENDCGLoss(gain='exponential')"


def test_exports() -> None:
    names = {"SoftmaxLoss", "XENDCGLoss", "softmax_loss", "xe_ndcg_loss"}
    assert names <= set(torch_ndcg.__all__)
    assert torch_ndcg.functional.xe_ndcg_loss is xe_ndcg_loss


# --- Errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"reduction": "max"}, ValueError, r"`reduction` to be one of .*'max'"),
        ({"gain": "log"}, ValueError, r"`gain` to be one of"),
        ({"ignore_index": 1.5}, TypeError, r"`ignore_index` to be an int or None"),
        ({"validate_args": 1}, TypeError, r"`validate_args`"),
        ({"k": 3}, TypeError, r"unexpected keyword argument `k`"),
        ({"temperature": 2.0}, TypeError, r"unexpected keyword argument `temperature`"),
        ({"eps": 1e-10}, TypeError, r"did you mean nothing: no epsilon is needed"),
        ({"padded_value_indicator": -1}, TypeError, r"did you mean `ignore_index`"),
        ({"where": None}, TypeError, r"did you mean `mask` \(Rax's `where`\)"),
        ({"label_fn": None}, TypeError, r"did you mean `gain` \(Rax's `label_fn"),
        ({"objective_seed": 1}, TypeError, r"did you mean `generator` \(LightGBM's"),
    ],
)
def test_option_errors(options: dict[str, Any], error: type[Exception], match: str) -> None:
    preds, target, _ = batch()
    for function, module in ((softmax_loss, SoftmaxLoss), (xe_ndcg_loss, XENDCGLoss)):
        with pytest.raises(error, match=match):
            function(preds, target, **options)
        with pytest.raises(error, match=match):
            module(**options)


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize(
    ("preds", "target", "options", "error", "match"),
    [
        (torch.zeros(2, 3), torch.zeros(2, 4), {}, ValueError, r"same shape"),
        (torch.zeros(2, dtype=torch.long), torch.zeros(2), {}, TypeError, r"floating"),
        (torch.tensor([0.0, float("nan")]), torch.zeros(2), {}, ValueError, r"no NaN"),
        (torch.tensor([0.0, float("inf")]), torch.ones(2), {}, ValueError, r"finite"),
        (torch.zeros(2), torch.tensor([1, -2]), {}, ValueError, r"non-negative"),
        (torch.zeros(2), torch.ones(2), {"weight": torch.ones(3)}, ValueError, r"`weight`"),
        (torch.zeros(2), torch.ones(2), {"weight": -torch.ones(2)}, ValueError, r"non-negative"),
        (torch.zeros(2), torch.ones(2), {"mask": torch.ones(2)}, TypeError, r"`mask`"),
        (torch.zeros(0), torch.zeros(0), {}, ValueError, r"non-empty last"),
    ],
)
def test_tensor_errors(
    function: Any,
    preds: torch.Tensor,
    target: torch.Tensor,
    options: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        function(preds, target, **options)


@pytest.mark.parametrize(
    ("noise", "error", "match"),
    [
        (torch.full((2, 3), 0.5)[:, :2], ValueError, r"`noise` to have the shape of `preds`"),
        (torch.zeros(2, 3, dtype=torch.long), TypeError, r"`noise` to be a floating tensor"),
        ([0.5] * 3, TypeError, r"`noise` to be a torch.Tensor"),
        (torch.tensor([[0.5, 1.5, 0.5]] * 2), ValueError, r"`noise` to be in \[0, 1\].*1.5"),
        (torch.tensor([[0.5, -0.1, 0.5]] * 2), ValueError, r"`noise` to be in \[0, 1\].*-0.1"),
        (torch.tensor([[0.5, float("nan"), 0.5]] * 2), ValueError, r"`noise` to be in.*nan"),
    ],
)
def test_noise_errors(noise: Any, error: type[Exception], match: str) -> None:
    preds, target = torch.zeros(2, 3), torch.tensor([[1, 0, 2], [0, 1, 0]])
    with pytest.raises(error, match=match):
        xe_ndcg_loss(preds, target, noise=noise)
    with pytest.raises(error, match=match):
        XENDCGLoss()(preds, target, noise=noise)
    if isinstance(noise, torch.Tensor) and noise.shape == preds.shape and noise.is_floating_point():
        # Padded items' noise is never read; unchecked values are not checked.
        padded = torch.tensor([[True, False, True]] * 2)
        assert torch.isfinite(xe_ndcg_loss(preds, target, mask=padded, noise=noise))
        assert torch.isfinite(xe_ndcg_loss(preds, target, noise=noise, validate_args=False))


# --- Host read-backs, compile, Lightning --------------------------------------------------------


@pytest.mark.parametrize("function", BOTH)
@pytest.mark.parametrize("validate", [True, False])
def test_cpu_step_reads_back_at_most_once(function: Any, validate: bool) -> None:
    preds, target, mask = batch(8, 40, seed=18, dtype=torch.float32)
    weight = torch.rand(preds.shape, generator=torch.Generator().manual_seed(1))
    extra = {"noise": noise_for(preds)} if function is xe_ndcg_loss else {}
    leaf = preds.clone().requires_grad_()
    with count_host_reads() as reads:
        loss = function(leaf, target, mask=mask, weight=weight, validate_args=validate, **extra)
        loss.backward()
    assert len(reads) <= (1 if validate else 0), reads


@pytest.mark.parametrize("function", BOTH)
def test_meta_tensors_run_without_a_read_back(function: Any) -> None:
    preds = torch.zeros(4, 16, device="meta", requires_grad=True)
    target = torch.zeros(4, 16, device="meta", dtype=torch.long)
    extra = {"noise": torch.zeros(4, 16, device="meta")} if function is xe_ndcg_loss else {}
    with count_host_reads() as reads:
        function(preds, target, validate_args=False, **extra).backward()
    assert reads == []


@needs_torch_2_13_to_compile_losses
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_compiled_at_two_lengths_equals_eager() -> None:
    """Both losses in one graph: softmax with weights, XE-NDCG with its noise passed in, and
    XE-NDCG with its noise drawn inside the graph (finite, positive)."""
    torch._dynamo.reset()

    def call(p: torch.Tensor, t: torch.Tensor, m: torch.Tensor, g: torch.Tensor) -> Any:
        losses = softmax_loss(p, t, mask=m, weight=g) + xe_ndcg_loss(p, t, mask=m, noise=g)
        return losses, xe_ndcg_loss(p.detach(), t, mask=m)

    compiled = torch.compile(call, backend="aot_eager")
    for length in (6, 11):
        preds, target, mask = batch(3, length, seed=19 + length, dtype=torch.float32)
        gamma = noise_for(preds)
        eager_leaf, compiled_leaf = preds.clone().requires_grad_(), preds.clone().requires_grad_()
        got, drawn = compiled(compiled_leaf, target, mask, gamma)
        expected, _ = call(eager_leaf, target, mask, gamma)
        got.backward()
        expected.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(compiled_leaf.grad, eager_leaf.grad)
        assert torch.isfinite(drawn)
        assert drawn > 0


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_compiled_with_dynamic_shapes_equals_eager(reduction: str) -> None:
    """``dynamic=True``, lists of three lengths and two batch shapes: the values and gradients
    of eager, for both losses (XE-NDCG with its noise passed in)."""
    torch._dynamo.reset()

    def call(p: torch.Tensor, t: torch.Tensor, m: torch.Tensor, g: torch.Tensor) -> Any:
        both = softmax_loss(p, t, mask=m, reduction=reduction)
        return both + xe_ndcg_loss(p, t, mask=m, noise=g, reduction=reduction)

    compiled = torch.compile(call, backend="aot_eager", dynamic=True)
    for batch_size, length in ((3, 6), (3, 9), (5, 13)):
        preds, target, mask = batch(batch_size, length, seed=31 + length, dtype=torch.float32)
        gamma = noise_for(preds)
        eager_leaf, compiled_leaf = preds.clone().requires_grad_(), preds.clone().requires_grad_()
        got = compiled(compiled_leaf, target, mask, gamma)
        expected = call(eager_leaf, target, mask, gamma)
        got.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(compiled_leaf.grad, eager_leaf.grad)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("loss_name", ["SoftmaxLoss", "XENDCGLoss"])
def test_lightning_trainer_fits_and_ranks_better(loss_name: str) -> None:
    lightning = pytest.importorskip("lightning")
    from tests.spawn import cpu_trainer

    gen = torch.Generator().manual_seed(20)
    features = torch.randn(64, 10, 4, generator=gen)
    target = (features[..., 0] * 1.5 + 0.3 * torch.randn(64, 10, generator=gen)).clamp(0, 3)
    target = target.round().long()
    mask = torch.rand(64, 10, generator=gen) > 0.2
    loss_fn = {"SoftmaxLoss": SoftmaxLoss(), "XENDCGLoss": XENDCGLoss()}[loss_name]

    class Ranker(lightning.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(1)
            self.linear = torch.nn.Linear(4, 1)
            self.loss_fn = loss_fn

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x).squeeze(-1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, m = batch
            loss: torch.Tensor = self.loss_fn(self(x), y, m)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.5)

    model = Ranker()
    with torch.no_grad():
        before = ndcg(model(features), target, mask=mask).mean().item()
    trainer = cpu_trainer(1, max_epochs=4)
    trainer.fit(model, DataLoader(TensorDataset(features, target, mask), batch_size=16))
    assert trainer.global_step == 4 * 64 // 16
    with torch.no_grad():
        after = ndcg(model(features), target, mask=mask).mean().item()
    assert after > before + 0.05, (before, after)
    assert model.linear.weight[0, 0] > 0
    assert math.isfinite(after)


# --- Review: scale checks, the generator, options that do not exist ----------------------------


@pytest.mark.parametrize("loss", [softmax_loss, xe_ndcg_loss])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_a_weight_near_the_largest_float_is_named_not_inf(loss: Any, reduction: str) -> None:
    # Before: 3e38 weights gave a finite loss only by luck and 4 lists summed to inf; the
    # other losses name `weight` here.
    preds, target = torch.tensor([[0.0, 1.0, 2.0]] * 4), torch.tensor([[1, 0, 2]] * 4)
    weight = torch.full((4, 3), 1e38)
    with pytest.raises(ValueError, match="`weight` to keep the loss and its gradient finite"):
        loss(preds, target, weight=weight, reduction=reduction)
    finite = loss(preds, target, weight=torch.full((4, 3), 1e30), reduction=reduction)
    assert torch.isfinite(finite)


@pytest.mark.parametrize("loss", [softmax_loss, xe_ndcg_loss])
def test_scores_that_span_past_the_largest_float_are_named(loss: Any) -> None:
    # Before: finite scores 6e38 apart gave an inf loss in float32, silently.
    preds = torch.tensor([[-3e38, 3e38], [0.0, 1.0]])
    with pytest.raises(ValueError, match="`preds` to keep the loss finite in torch"):
        loss(preds, torch.tensor([[1, 0], [1, 0]]))
    mask = torch.tensor([[True, True], [True, True]])
    with pytest.raises(ValueError, match="`preds` to keep the loss finite"):
        loss(preds, torch.tensor([[1, 0], [1, 0]]), mask=mask)
    unchecked = loss(preds, torch.tensor([[1, 0], [1, 0]]), validate_args=False)
    assert unchecked.isinf()  # validate_args=False skips the check, as for the other losses


def test_xe_ndcg_names_a_generator_that_is_not_one() -> None:
    # Before: torch.rand's own TypeError, a list of its overloads.
    preds, target = torch.tensor([0.0, 1.0]), torch.tensor([1, 0])
    with pytest.raises(TypeError, match="Expected `generator` to be a torch"):
        xe_ndcg_loss(preds, target, generator=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Expected `generator` to be a torch"):
        XENDCGLoss()(preds, target, generator="seed")  # type: ignore[arg-type]


@pytest.mark.parametrize("module", [SoftmaxLoss, XENDCGLoss])
@pytest.mark.parametrize("name", ["k", "discount"])
def test_setting_an_option_the_softmax_losses_lack_names_it(module: Any, name: str) -> None:
    # Before: `loss_fn.k = 5` raised "property 'discount' ... has no setter".
    loss_fn = module()
    with pytest.raises(AttributeError, match=f"`{module.__name__}` takes no `{name}`"):
        setattr(loss_fn, name, 5)
    assert getattr(loss_fn, name) is None
    loss_fn.gain = "linear"  # the options it has are set and checked as in __init__
    assert repr(loss_fn) == f"{module.__name__}(gain='linear')"
    with pytest.raises(ValueError, match="`reduction`"):
        loss_fn.reduction = "avg"



@pytest.mark.parametrize(
    ("gain", "target"),
    [
        (torch.log, [[1, 2, 1], [2, 0, 1]]),  # log 0 = -inf in the second list
        (lambda y: torch.where(y > 1, torch.inf, y), [[1, 1, 0], [2, 0, 1]]),
    ],
    ids=["log", "inf above 1"],
)
def test_xe_ndcg_drops_a_list_whose_callable_gain_is_not_finite(gain: Any, target: Any) -> None:
    """Unchecked, a callable gain has no limit: a list of non-finite gains has loss 0, never NaN,
    and the other list keeps the loss it has alone (with the same noise)."""
    preds = torch.tensor([[0.0, 1.0, 0.5], [0.5, 2.0, -1.0]], requires_grad=True)
    labels = torch.tensor(target)
    seeded = torch.Generator().manual_seed(3)
    # Unchecked: with `validate_args` the check names such a gain.
    losses = xe_ndcg_loss(
        preds, labels, gain=gain, reduction="none", generator=seeded, validate_args=False
    )
    losses.sum().backward()
    assert preds.grad is not None
    assert torch.equal(losses[1], torch.zeros(()))
    assert torch.equal(preds.grad[1], torch.zeros(3))
    assert torch.isfinite(preds.grad[0]).all()
    noise = torch.rand(preds.shape, generator=torch.Generator().manual_seed(3))
    alone = xe_ndcg_loss(
        preds[:1], labels[:1], gain=gain, noise=noise[:1], reduction="none", validate_args=False
    )
    assert alone.item() > 0
    torch.testing.assert_close(losses[:1], alone)
