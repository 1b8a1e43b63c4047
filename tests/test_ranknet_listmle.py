"""RankNetLoss / ListMLELoss: loop references of their papers' formulas, the peers' formulas
(allRank's where it imports, and restated), the tie rule, gradcheck, padding, weights,
reductions, options and errors, and invariants."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import references as ref
from torch_ndcg import ListMLELoss, RankNetLoss, listmle_loss, ranknet_loss

ALLRANK_PATH = os.environ.get("ALLRANK_PATH", "/tmp/allrank_site")


@pytest.fixture(scope="module")
def allrank() -> Any:
    """allRank 1.4.3's loss modules (imported with the benchmark's stand-ins), or a skip."""
    from benchmarks.bench_losses import import_allrank

    losses = import_allrank(ALLRANK_PATH)
    if losses is None:
        pytest.skip("allRank is not importable")
    return losses


def batch(
    n: int = 5, length: int = 7, *, seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores, graded labels 0-3 with ties (list 1 all 0), padding at the end of some lists
    (list 4 a single real item)."""
    gen = torch.Generator().manual_seed(seed)
    preds = torch.randn(n, length, generator=gen, dtype=dtype)
    target = torch.randint(0, 4, (n, length), generator=gen)
    target[1] = 0
    lengths = torch.randint(2, length + 1, (n,), generator=gen)
    lengths[0], lengths[-1] = length, 1
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return preds, target, mask


def weights_for(preds: torch.Tensor, seed: int = 3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(preds.shape, generator=gen, dtype=preds.dtype) * 2


def reference(name: str, preds: Any, target: Any, real: Any, weight: Any, **options: Any) -> Any:
    rows = (preds.tolist(), target.tolist(), real.tolist())
    weights = None if weight is None else weight.tolist()
    if name == "ranknet":
        return torch.tensor(ref.ranknet_lists(*rows, weights, **options), dtype=torch.float64)
    return torch.tensor(ref.listmle_lists(*rows, weights, **options), dtype=torch.float64)


def counted(target: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The lists with two real items of different labels."""
    high = torch.where(real, target, -1).amax(-1)
    low = torch.where(real, target, 10**6).amin(-1)
    return high > low


LOSSES = {
    "ranknet": [{}, {"sigma": 0.7}],
    "listmle": [{}, {"position_aware": True}],
}
CASES = [(name, opts) for name, all_opts in LOSSES.items() for opts in all_opts]
FUNCTIONS = {"ranknet": ranknet_loss, "listmle": listmle_loss}


# --- Against loop references of the papers' formulas -------------------------------------------


@pytest.mark.parametrize(("name", "opts"), CASES)
@pytest.mark.parametrize("padding", ["mask", "ignore_index", None])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_equals_the_loop_reference(
    name: str, opts: dict[str, Any], padding: Any, weighted: bool, reduction: str
) -> None:
    preds, target, mask = batch(seed=1)
    real = mask if padding else torch.ones_like(mask)
    weight = weights_for(preds) if weighted else None
    given: dict[str, Any] = {"weight": weight, "reduction": reduction, **opts}
    if padding == "mask":
        given["mask"] = mask
    elif padding == "ignore_index":
        target = target.masked_fill(~mask, -1)
        given["ignore_index"] = -1
    per_list = reference(name, preds, target, real, weight, **opts)
    expected = {
        "none": per_list,
        "sum": per_list.sum(),
        "mean": per_list.sum() / counted(target, real).sum().clamp(min=1),
    }[reduction]
    torch.testing.assert_close(FUNCTIONS[name](preds, target, **given), expected)


@pytest.mark.parametrize(("name", "opts"), CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize("scale", [1.0, 40.0])
def test_long_lists_and_wide_spans_equal_the_reference(
    name: str, opts: dict[str, Any], dtype: torch.dtype, validate_args: bool, scale: float
) -> None:
    """Batches past a block, past ListMLE's one-sort size, scores spanning past its plain sums
    (and unchecked, whose span is not known): the same numbers as the float64 loops."""
    preds, target, mask = batch(3, 600, seed=4)
    preds = preds * scale
    target = target.masked_fill(~mask, -1)
    weight = weights_for(preds)
    given = {"ignore_index": -1, "weight": weight.to(dtype), "reduction": "none", **opts}
    loss = FUNCTIONS[name](preds.to(dtype), target, validate_args=validate_args, **given)
    expected = reference(name, preds.to(dtype).double(), target, mask, weight.to(dtype), **opts)
    torch.testing.assert_close(
        loss.double(), expected, rtol=1e-5 if dtype == torch.float32 else 1e-7, atol=1e-3
    )


def _plackett_luce_float64(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """ListMLE of one list of distinct labels in float64 autograd: a sum over the positions."""
    ranked = scores[labels.argsort(descending=True)]
    return sum(torch.logsumexp(ranked[i:], 0) - ranked[i] for i in range(len(ranked)))


@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize("span", [1e3, 1e5, 1e7])
def test_listmle_gradient_of_float32_scores_spanning_far(validate_args: bool, span: float) -> None:
    """Scores far apart in float32: the log-sums round to their magnitude's spacing, which the
    gradient must not take into its exponentials (the loss and gradient of float64 loops)."""
    generator = torch.Generator().manual_seed(11)
    scores = (torch.rand(4, 12, generator=generator) - 0.5) * span
    scores[0] = torch.tensor([1e7, 0.0, -1e7, 5e6] * 3) * span / 2e7
    labels = torch.stack([torch.randperm(12, generator=generator) for _ in range(4)])
    leaf = scores.clone().requires_grad_()
    loss = listmle_loss(leaf, labels, reduction="sum", validate_args=validate_args)
    loss.backward()
    exact = scores.double().requires_grad_()
    expected = sum(_plackett_luce_float64(exact[i], labels[i]) for i in range(4))
    expected.backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(leaf.grad.double(), exact.grad, rtol=1e-4, atol=1e-4)


def test_many_blocks_of_pairs_equal_one() -> None:
    """Lists long enough for RankNet's pairs to take several blocks of rows."""
    preds, target, mask = batch(2, 1_200, seed=6, dtype=torch.float32)
    leaf = preds.clone().requires_grad_()
    loss = ranknet_loss(leaf, target, mask=mask, reduction="none")
    loss.sum().backward()
    dense = preds.double().clone().requires_grad_()
    won = (target[:, :, None] > target[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    gaps = dense[:, :, None] - dense[:, None, :]
    expected = torch.where(won, torch.nn.functional.softplus(-gaps), 0).sum((1, 2))
    expected.sum().backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-5, atol=1e-2)
    torch.testing.assert_close(leaf.grad.double(), dense.grad, rtol=1e-4, atol=1e-4)


# --- Ties ---------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 6).flatmap(
        lambda n: st.tuples(
            st.lists(st.floats(-3, 3), min_size=n, max_size=n),
            st.lists(st.integers(0, 2), min_size=n, max_size=n),
        )
    )
)
def test_listmle_ties_take_the_least_likely_order(data: Any) -> None:
    """The loss is the largest over every order the labels allow (all of them, brute force)."""
    scores, labels = data
    if len(set(labels)) < 2:
        return
    expected = ref.listmle_worst_order(scores, labels)
    loss = listmle_loss(torch.tensor(scores, dtype=torch.float64), torch.tensor(labels))
    assert loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_the_tie_rule_ignores_the_input_order() -> None:
    preds, target, mask = batch(seed=7)
    perm = torch.randperm(preds.shape[-1], generator=torch.Generator().manual_seed(0))
    for function in FUNCTIONS.values():
        torch.testing.assert_close(
            function(preds, target, mask=mask, reduction="none"),
            function(preds[:, perm], target[:, perm], mask=mask[:, perm], reduction="none"),
        )


def test_listmle_without_weight_is_one_number_for_exact_ties_in_any_order_and_batch() -> None:
    """Items of equal label and score (-0.0 and +0.0 among them): without ``weight`` their
    order takes no part, in any input order, in a small batch and past the one-sort size."""
    scores = torch.tensor([[-0.0, 0.0, 0.0, 1.5, 1.5], [0.0, -0.0, 2.0, 2.0, -1.0]])
    labels = torch.tensor([[1, 1, 0, 2, 2], [3, 3, 1, 1, 0]])
    alone = listmle_loss(scores, labels, reduction="none")
    permuted = torch.tensor([4, 1, 3, 0, 2])
    torch.testing.assert_close(
        listmle_loss(scores[:, permuted], labels[:, permuted], reduction="none"), alone
    )
    many = 1000  # 10,000 items: past the batch size that sorts one key
    batched = listmle_loss(scores.repeat(many, 1), labels.repeat(many, 1), reduction="none")
    torch.testing.assert_close(batched, alone.repeat(many), rtol=1e-6, atol=1e-6)
    expected = ref.listmle_lists(scores.tolist(), labels.tolist(), [[True] * 5] * 2)
    torch.testing.assert_close(alone, torch.tensor(expected).float(), rtol=1e-6, atol=1e-6)


def test_lists_without_an_order_count_for_nothing() -> None:
    """All labels equal, a single real item, only padding: loss 0, gradient 0, not in "mean"."""
    preds = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([[2, 2, 2], [1, 0, -1], [3, -1, -1], [-1, -1, -1]])
    for function in FUNCTIONS.values():
        per_list = function(preds, target, ignore_index=-1, reduction="none")
        assert per_list[[0, 2, 3]].tolist() == [0.0, 0.0, 0.0]
        mean = function(preds, target, ignore_index=-1)
        torch.testing.assert_close(mean, per_list[1])
        (grad,) = torch.autograd.grad(mean, preds)
        assert grad[[0, 2, 3]].abs().sum() == 0
        assert grad[1, 2] == 0


def test_empty_input() -> None:
    for function in FUNCTIONS.values():
        preds = torch.zeros(0, 5, requires_grad=True)
        loss = function(preds, torch.zeros(0, 5, dtype=torch.long))
        assert loss.item() == 0
        loss.backward()
        with pytest.raises(ValueError, match="non-empty last"):  # as every loss
            function(torch.zeros(3, 0), torch.zeros(3, 0))


# --- Peers: allRank (where it imports) and its formulas restated ---------------------------------


def tie_free_batch(n: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and labels with no ties (a permutation per list), -1 padding at some lists' end."""
    gen = torch.Generator().manual_seed(seed)
    preds = torch.randn(n, length, generator=gen, dtype=torch.float64)
    target = torch.stack([torch.randperm(length, generator=gen) for _ in range(n)])
    lengths = torch.randint(2, length + 1, (n,), generator=gen)
    target = target.masked_fill(torch.arange(length)[None, :] >= lengths[:, None], -1)
    return preds, target


def number_of_pairs(target: torch.Tensor) -> torch.Tensor:
    real = target != -1
    return ((target[:, :, None] > target[:, None, :]) & real[:, :, None] & real[:, None, :]).sum()


@pytest.mark.parametrize("length", [3, 10, 40])
def test_ranknet_equals_allranks_formula(length: int) -> None:
    preds, target = tie_free_batch(6, length, seed=length)
    target = target % 3 - (target == -1).long() * 0  # graded labels, ties between items
    target = torch.where(target < 0, -1, target)
    ours = ranknet_loss(preds, target, ignore_index=-1, reduction="sum") / number_of_pairs(target)
    torch.testing.assert_close(ours, ref.allrank_rank_net(preds, target.double()))


@pytest.mark.parametrize("length", [3, 10, 40])
def test_listmle_equals_allranks_formula(length: int) -> None:
    preds, target = tie_free_batch(6, length, seed=length)
    ours = listmle_loss(preds, target, ignore_index=-1)
    expected = ref.allrank_list_mle(preds, target.double())
    torch.testing.assert_close(ours, expected, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("length", [3, 10, 40])
def test_ranknet_and_listmle_equal_allrank(allrank: Any, length: int) -> None:
    preds, target = tie_free_batch(6, length, seed=length)
    graded = torch.where(target < 0, -1, target % 3).double()
    leaf = preds.clone().requires_grad_()
    ours = ranknet_loss(leaf, graded, ignore_index=-1, reduction="sum") / number_of_pairs(graded)
    theirs_leaf = preds.clone().requires_grad_()
    theirs = allrank.rankNet(theirs_leaf, graded)  # float32: its targets are
    torch.testing.assert_close(ours, theirs.double())
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(leaf.grad, theirs_leaf.grad, rtol=1e-6, atol=1e-7)
    leaf.grad, theirs_leaf.grad = None, None
    ours = listmle_loss(leaf, target, ignore_index=-1)
    theirs = allrank.listMLE(theirs_leaf, target.double())
    torch.testing.assert_close(ours, theirs, rtol=1e-7, atol=1e-7)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(leaf.grad, theirs_leaf.grad, rtol=1e-6, atol=1e-7)


def test_position_aware_equals_sentence_transformers_formula() -> None:
    """PListMLELoss's default weights: 2^(n - r) - 1 at 0-based position r, normalised; its
    eps of 1e-10 aside."""
    preds, target = tie_free_batch(4, 9, seed=2)
    real = target != -1
    for row in range(preds.shape[0]):
        items = sorted(range(9), key=lambda i: -int(target[row, i]))
        items = [i for i in items if real[row, i]]
        weights = ref.p_listmle_weights(len(items))
        expected = ref.plackett_luce_nll([float(preds[row, i]) for i in items], weights)
        ours = listmle_loss(preds[row], target[row], ignore_index=-1, position_aware=True)
        assert ours.item() == pytest.approx(expected, rel=1e-12)


# --- Gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "opts"), CASES)
@pytest.mark.parametrize("validate_args", [True, False])
def test_gradcheck(name: str, opts: dict[str, Any], validate_args: bool) -> None:
    preds, target, mask = batch(4, 5, seed=8)
    weight = weights_for(preds)

    def loss(scores: torch.Tensor) -> torch.Tensor:
        return FUNCTIONS[name](
            scores, target, mask=mask, weight=weight, validate_args=validate_args, **opts
        )

    assert torch.autograd.gradcheck(loss, (preds.clone().requires_grad_(),))


@pytest.mark.parametrize(("name", "opts"), CASES)
def test_second_derivative_raises(name: str, opts: dict[str, Any]) -> None:
    """Under ``create_graph`` the first derivative is the one without it; differentiating it
    again raises rather than treating the kept gradient as a constant (a silent 0)."""
    preds, target, mask = batch(4, 5, seed=9)
    leaf = preds.clone().requires_grad_()
    (grad,) = torch.autograd.grad(
        FUNCTIONS[name](leaf, target, mask=mask, **opts), leaf, create_graph=True
    )
    (expected,) = torch.autograd.grad(FUNCTIONS[name](leaf, target, mask=mask, **opts), leaf)
    torch.testing.assert_close(grad, expected)
    with pytest.raises(RuntimeError, match="no second derivative"):
        (grad.square().sum() + leaf.sum()).backward()

    # With respect to the scores themselves (the error leads back to them), and a Hessian.
    def loss_of(x: torch.Tensor) -> torch.Tensor:
        return FUNCTIONS[name](x, target, mask=mask, **opts)

    (again,) = torch.autograd.grad(loss_of(leaf), leaf, create_graph=True)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(again.sum(), leaf)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.functional.hessian(loss_of, leaf.detach())


# --- Modules, options and errors ----------------------------------------------------------------


def test_modules_equal_their_functions_and_recheck_their_options() -> None:
    preds, target, mask = batch(seed=9)
    weight = weights_for(preds)
    module = RankNetLoss(sigma=0.5, reduction="sum")
    torch.testing.assert_close(
        module(preds, target, mask, weight),
        ranknet_loss(preds, target, mask=mask, weight=weight, sigma=0.5, reduction="sum"),
    )
    module.sigma = 2.0
    assert module.sigma == 2.0
    assert repr(module) == "RankNetLoss(sigma=2.0)"
    with pytest.raises(ValueError, match="`sigma`"):
        module.sigma = -1.0
    assert module.sigma == 2.0
    listmle = ListMLELoss(position_aware=True)
    torch.testing.assert_close(
        listmle(preds, target, mask), listmle_loss(preds, target, mask=mask, position_aware=True)
    )
    listmle.reduction = "none"
    assert listmle(preds, target, mask).shape == (preds.shape[0],)
    assert repr(listmle) == "ListMLELoss(position_aware=True)"
    with pytest.raises(TypeError, match="`position_aware`"):
        listmle.position_aware = 1


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda p, t: ranknet_loss(p, t, sigma=0), ValueError, "`sigma`"),
        (lambda p, t: RankNetLoss(sigma=float("nan")), ValueError, "`sigma`"),
        (lambda p, t: listmle_loss(p, t, position_aware="yes"), TypeError, "`position_aware`"),
        (lambda p, t: ListMLELoss(reduction="avg"), ValueError, "`reduction`"),
        (lambda p, t: ranknet_loss(p, t, reduction="avg"), ValueError, "`reduction`"),
        (lambda p, t: listmle_loss(p, -t - 1), ValueError, "`target`"),
        (lambda p, t: ranknet_loss(p, -t - 1), ValueError, "`target`"),
        (lambda p, t: ranknet_loss(p, t, ignore_index=0.5), TypeError, "`ignore_index`"),
        (lambda p, t: listmle_loss(p, t, weight=-torch.ones_like(p)), ValueError, "`weight`"),
        (lambda p, t: ranknet_loss(p, t, weight=torch.ones(3)), ValueError, "`weight`"),
        (lambda p, t: listmle_loss(p.long(), t), TypeError, "`preds`"),
        (lambda p, t: ranknet_loss(p, t[:, :2]), ValueError, "`target`"),
        (lambda p, t: listmle_loss(p * float("nan"), t), ValueError, "`preds`"),
        (lambda p, t: ranknet_loss(p, t, padded_value_indicator=-1), TypeError, "`ignore_index`"),
        (lambda p, t: listmle_loss(p, t, lambda_weight=1), TypeError, "`position_aware=True`"),
        (lambda p, t: ListMLELoss(eps=1e-10), TypeError, "no epsilon"),
        (lambda p, t: ranknet_loss(p, t, mask=torch.ones_like(p)), TypeError, "`mask`"),
    ],
)
def test_errors_name_the_argument(call: Any, error: type[Exception], match: str) -> None:
    preds, target, _ = batch(seed=10)
    with pytest.raises(error, match=match):
        call(preds, target)


def test_scores_too_wide_for_a_finite_loss() -> None:
    preds = torch.tensor([[-3e38, 3e38]])
    target = torch.tensor([[1, 0]])
    with pytest.raises(ValueError, match="`preds`"):
        listmle_loss(preds, target)
    with pytest.raises(ValueError, match="`sigma`"):
        ranknet_loss(preds, target)


# --- Invariants (hypothesis) ---------------------------------------------------------------------


@st.composite
def lists(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    length = draw(st.integers(1, 12))
    labels = draw(st.lists(st.integers(0, 4), min_size=length, max_size=length))
    scores = draw(st.lists(st.floats(-5, 5), min_size=length, max_size=length))
    return torch.tensor(scores, dtype=torch.float64), torch.tensor(labels)


@settings(max_examples=50, deadline=None)
@given(lists(), st.floats(-50, 50), st.booleans())
def test_listmle_is_non_negative_and_shift_invariant(data: Any, shift: float, aware: bool) -> None:
    scores, labels = data
    loss = listmle_loss(scores, labels, position_aware=aware)
    assert loss.item() >= 0
    shifted = listmle_loss(scores + shift, labels, position_aware=aware)
    assert shifted.item() == pytest.approx(loss.item(), rel=1e-9, abs=1e-9)
    ranknet = ranknet_loss(scores, labels)
    assert ranknet.item() >= 0
    assert ranknet_loss(scores + shift, labels).item() == pytest.approx(ranknet.item(), abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(lists())
def test_ranknet_has_no_gradient_where_there_is_no_pair(data: Any) -> None:
    """Items of one label (here every item but the last takes the label of the first) have no
    pair among themselves: only pairs with the last item move them."""
    scores, labels = data
    labels = torch.full_like(labels, int(labels[0]))
    leaf = scores.clone().requires_grad_()
    ranknet_loss(leaf, labels, reduction="sum").backward()
    assert leaf.grad.abs().sum() == 0
