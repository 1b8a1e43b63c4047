"""The seams between the entry points: input kinds, padding and exclusions, checks, clicks.

Each test holds one behaviour that a path did not share with the others: a dense and a sparse
target, `exclude` and `mask`, `forward` and `aggregated`, `__init__` and a later setting.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
import torch

from tests.conftest import needs_torch_2_13_to_compile_losses
from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    UnbiasedLambdaRankLoss,
    catalog_ndcg,
    ndcg,
    simulate_clicks,
)

# --- 1. Arguments of the wrong type are named ---------------------------------------------------


def _scores_and_labels() -> tuple[torch.Tensor, torch.Tensor]:
    preds = torch.tensor([[0.9, 0.5, 0.3], [0.2, 0.8, 0.4]])
    target = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    return preds, target


@pytest.mark.parametrize("kind", [np.asarray, lambda t: t.tolist()], ids=["numpy", "list"])
def test_metric_names_a_target_that_is_no_tensor(kind: Any) -> None:
    preds, target = _scores_and_labels()
    with pytest.raises(TypeError, match=r"Expected `target` to be a torch\.Tensor, but got"):
        NDCG().update(preds, kind(target))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("call", ["ndcg", "NDCG"])
def test_exclude_that_is_no_tensor_is_named(call: str, sparse: bool) -> None:
    preds, target = _scores_and_labels()
    labels = target.to_sparse() if sparse else target
    message = re.escape("Expected `exclude` as a bool [B, N] tensor") + ".*but got list"
    function = ndcg if call == "ndcg" else NDCG().update
    with pytest.raises(TypeError, match=message):
        function(preds, labels, exclude=[[1], [2]])


@pytest.mark.parametrize(
    ("relevant", "given"),
    [([[1], [2]], "list"), (np.array([[1], [2]]), "ndarray")],
    ids=["list", "numpy"],
)
def test_catalog_names_relevant_that_is_no_tensor(relevant: Any, given: str) -> None:
    queries, items = torch.eye(2, 3), torch.eye(5, 3)
    message = re.escape("Expected `relevant` as a sparse [B, N] tensor") + f".*but got {given}"
    with pytest.raises(TypeError, match=message):
        catalog_ndcg(queries, items, relevant, k=3)
    with pytest.raises(TypeError, match=r"Expected `exclude` as .*but got list"):
        catalog_ndcg(queries, items, torch.tensor([[1], [2]]), k=3, exclude=[[0], [0]])


def test_catalog_hints_a_column_for_one_relevant_id_per_user() -> None:
    queries, items = torch.eye(2, 3), torch.eye(5, 3)
    with pytest.raises(TypeError, match=re.escape("`relevant[:, None]`")):
        catalog_ndcg(queries, items, torch.tensor([1, 2]), k=3)
    # The hint holds: each user's best item (its own axis) as a column of ids.
    got = catalog_ndcg(queries, items, torch.tensor([0, 1])[:, None], k=3)
    torch.testing.assert_close(got, torch.ones(2))


# --- 2. A row of padding only is no list, whatever the target's layout ------------------------


def _one_row_of_padding() -> dict[str, torch.Tensor]:
    """Two lists; the first is all padding (its items masked, or all excluded)."""
    return {
        "preds": torch.tensor([[0.9, 0.5, 0.3], [0.9, 0.5, 0.3]]),
        "target": torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
        "mask": torch.tensor([[False, False, False], [True, True, True]]),
        # Every item of the first row.
        "exclude": torch.tensor([[0, 1, 2], [-1, -1, -1]]),
    }


@pytest.mark.parametrize("action", ["neg", "pos", "skip"])
@pytest.mark.parametrize("padding", ["mask", "exclude"])
def test_metric_counts_no_list_of_padding_with_a_sparse_target(action: str, padding: str) -> None:
    case = _one_row_of_padding()
    values = {}
    for layout in ("dense", "sparse"):
        target = case["target"] if layout == "dense" else case["target"].to_sparse()
        metric = NDCG(k=2, empty_target_action=action)
        metric.update(case["preds"], target, **{padding: case[padding]})
        values[layout] = metric.compute()
        assert int(metric.count) == 1, layout
    assert values["sparse"].item() == values["dense"].item() == 1.0


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_a_row_of_padding_is_no_empty_target_with_a_sparse_target(layout: str) -> None:
    case = _one_row_of_padding()
    sparse = case["target"].to_sparse() if layout == "coo" else case["target"].to_sparse_csr()
    for padding in ("mask", "exclude"):
        expected = ndcg(
            case["preds"],
            case["target"],
            empty_target_action="error",
            k=2,
            **{padding: case[padding]},
        )
        got = ndcg(
            case["preds"], sparse, empty_target_action="error", k=2, **{padding: case[padding]}
        )
        torch.testing.assert_close(got, expected)
    # A row with real items and no relevant one is still an empty target.
    with pytest.raises(ValueError, match="no relevant item"):
        ndcg(case["preds"], sparse, empty_target_action="error")


# --- 3. With a sparse target, padding is padding (as with a dense one) -----------------------


def _graded_lists() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    preds = torch.randn(4, 6, generator=gen)
    target = torch.randint(0, 3, (4, 6), generator=gen).float()
    return preds, target


@pytest.mark.parametrize("to_sparse", [torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr])
def test_a_grade_under_the_mask_is_padding_with_a_sparse_target(to_sparse: Any) -> None:
    preds, target = _graded_lists()
    mask = target.eq(0).logical_not()  # every graded item...
    mask[:, 0] = False  # ...but one, masked though graded
    mask[:, 3] = True
    target[:, 0] = 2.0
    expected = ndcg(preds, target, mask=mask, k=3)
    got = ndcg(preds, to_sparse(target), mask=mask, k=3)
    torch.testing.assert_close(got, expected)
    metric = NDCG(k=3)
    metric.update(preds, to_sparse(target), mask=mask)
    torch.testing.assert_close(metric.compute(), expected.mean())


def test_a_stored_zero_grade_on_an_excluded_item_is_no_relevant_item() -> None:
    preds, target = _graded_lists()
    target[:, 1] = 0.0
    rows = torch.arange(4).repeat_interleave(2)
    cols = torch.tensor([1, 2]).repeat(4)  # a stored 0 on item 1, a grade on item 2
    stored = torch.sparse_coo_tensor(
        torch.stack([rows, cols]), target[rows, cols] + cols.eq(2).float(), target.shape
    )
    dense = stored.to_dense()
    exclude = torch.full((4, 1), 1)
    expected = ndcg(preds, dense, exclude=exclude)
    torch.testing.assert_close(ndcg(preds, stored, exclude=exclude), expected)
    torch.testing.assert_close(ndcg(preds, stored.to_sparse_csr(), exclude=exclude), expected)
    # A grade other than 0 on an excluded item is still an error, on both layouts.
    for relevant in (dense, stored):
        with pytest.raises(ValueError, match="both relevant and excluded"):
            ndcg(preds, relevant, exclude=torch.full((4, 1), 2))


# --- 4. A NaN score of a padded or excluded item never counts, whatever the list length ------


@pytest.mark.parametrize("length", [5, 33, 64, 100])
@pytest.mark.parametrize("padding", ["mask", "exclude"])
def test_a_nan_score_on_padding_is_accepted_with_a_sparse_target(length: int, padding: str) -> None:
    gen = torch.Generator().manual_seed(length)
    preds = torch.randn(3, length, generator=gen)
    target = (torch.rand(3, length, generator=gen) < 0.3).float()
    target[:, 1] = 0.0
    preds[:, 1] = torch.nan
    mask = torch.ones(3, length, dtype=torch.bool)
    mask[:, 1] = False
    given = {"mask": mask} if padding == "mask" else {"exclude": torch.full((3, 1), 1)}
    expected = ndcg(preds, target, k=4, **given)
    torch.testing.assert_close(ndcg(preds, target.to_sparse(), k=4, **given), expected)
    # A NaN on an item that ranks is an error, on both layouts.
    preds[:, 2] = torch.nan
    for labels in (target, target.to_sparse()):
        with pytest.raises(ValueError, match="NaN"):
            ndcg(preds, labels, k=4, **given)


def test_a_nan_score_of_an_excluded_item_is_accepted_by_the_catalog() -> None:
    queries, items = torch.eye(2, 3), torch.eye(5, 3)

    def nan_on_item_1(query_block: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        scores = query_block @ chunk.T
        scores[:, 1] = torch.nan
        return scores

    relevant = torch.tensor([[0], [2]])
    exclude = torch.tensor([[1], [1]])
    expected = catalog_ndcg(queries, items, relevant, k=3, exclude=exclude)
    got = catalog_ndcg(queries, items, relevant, k=3, exclude=exclude, score_fn=nan_on_item_1)
    torch.testing.assert_close(got, expected)


# --- 5. Dense target with `exclude`: padding may be excluded; an id twice is an error ---------


def test_padding_may_be_excluded_with_a_dense_target() -> None:
    preds, target = _graded_lists()
    exclude = torch.tensor([[0], [0], [-1], [-1]])
    # Item 0 of the first two lists is padding with a non-zero label: by `ignore_index`...
    labels = target.clone()
    labels[:2, 0] = -1
    expected = ndcg(preds, labels.clamp(min=0), mask=labels.ge(0))
    torch.testing.assert_close(ndcg(preds, labels, ignore_index=-1, exclude=exclude), expected)
    # ...or by `mask`; both ways also in the metric.
    labels[:2, 0] = 2.0
    mask = torch.ones_like(labels, dtype=torch.bool)
    mask[:2, 0] = False
    torch.testing.assert_close(ndcg(preds, labels, mask=mask, exclude=exclude), expected)
    metric = NDCG()
    metric.update(preds, labels, mask=mask, exclude=exclude)
    torch.testing.assert_close(metric.compute(), expected.mean())
    # A real relevant item that is excluded is still an error.
    with pytest.raises(ValueError, match="both relevant and excluded"):
        ndcg(preds, labels.clamp(min=1), mask=mask, exclude=torch.tensor([[1], [1], [1], [1]]))


@pytest.mark.parametrize("layout", ["dense", "sparse", "sparse with a mask"])
def test_an_id_excluded_twice_is_an_error_on_every_path(layout: str) -> None:
    preds, target = _graded_lists()
    target[:, 1] = 0.0
    exclude = torch.tensor([[1, 1], [-1, -1], [-1, -1], [-1, -1]])
    given: dict[str, Any] = {"exclude": exclude}
    labels = target if layout == "dense" else target.to_sparse()
    if layout == "sparse with a mask":
        given["mask"] = torch.ones_like(target, dtype=torch.bool)
    message = "Expected each excluded item once per user, but a user lists an item twice."
    with pytest.raises(ValueError, match=re.escape(message)):
        ndcg(preds, labels, **given)
    with pytest.raises(ValueError, match=re.escape(message)):
        NDCG().update(preds, labels, **given)
    with pytest.raises(ValueError, match=re.escape(message)):
        catalog_ndcg(
            torch.eye(4, 3), torch.eye(6, 3), torch.tensor([[0]] * 4), k=2, exclude=exclude
        )


# --- 7. UnbiasedLambdaRankLoss.aggregated: as `forward` ranks, checks and learns ----------------


def _session_with_an_item_not_shown() -> tuple[torch.Tensor, ...]:
    """One session per list; item 1 of each was not shown (position -1)."""
    preds = torch.tensor([[0.5, 2.0, -0.3, 1.0, 0.1], [1.5, 0.2, 0.4, -1.0, 0.0]])
    clicks = torch.tensor([[1, 0, 0, 1, 0], [0, 0, 1, 0, 0]])
    positions = torch.tensor([[0, -1, 1, 2, 3], [3, -1, 0, 2, 1]])
    # One-hot views at each shown item's position, times 1 / sqrt(ideal DCG of the clicks).
    ideal = torch.cumsum(1 / torch.log2(torch.arange(2, 7, dtype=torch.float64)), 0)
    scale = ideal[clicks.sum(-1) - 1].rsqrt()[:, None, None]
    shown = positions.ge(0)[..., None]
    views = torch.nn.functional.one_hot(positions.clamp(min=0), 4).double() * shown * scale
    return preds.double(), clicks, positions, views


def _loss_and_grad(fn: Any, preds: torch.Tensor, *args: Any) -> tuple[torch.Tensor, ...]:
    leaf = preds.clone().requires_grad_()
    loss = fn(leaf, *args)
    loss.backward()
    assert leaf.grad is not None
    return loss.detach(), leaf.grad


def test_aggregated_ranks_only_the_items_shown_as_forward_does() -> None:
    preds, clicks, positions, views = _session_with_an_item_not_shown()
    per_session, summed = (
        UnbiasedLambdaRankLoss(num_positions=4, bias_norm=1.0, momentum=0.5).double()
        for _ in range(2)
    )
    one_hot = (views > 0).double()  # the statistics count each click alike: unscaled counts
    for step in range(3):
        expected = _loss_and_grad(per_session, preds, clicks, positions)
        got = _loss_and_grad(summed.eval().aggregated, preds, clicks[..., None] * views, views)
        summed.train().aggregated(preds, clicks[..., None] * one_hot, one_hot)  # the update
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(summed.statistics, per_session.statistics)
        torch.testing.assert_close(summed.t_plus, per_session.t_plus)
        preds = preds + 0.3 * torch.randn(
            preds.shape, generator=torch.Generator().manual_seed(step), dtype=preds.dtype
        )
    # The score of an item not shown is never read: NaN there changes nothing.
    preds[:, 1] = torch.nan
    expected = per_session.eval()(preds, clicks, positions)
    torch.testing.assert_close(
        summed.eval().aggregated(preds, clicks[..., None] * views, views), expected
    )


@pytest.mark.parametrize(
    ("score", "message"),
    [
        (math.inf, "Expected `preds` to be finite, but found inf."),
        (-math.inf, "Expected `preds` to be finite, but found -inf."),
        (math.nan, "Expected `preds` to contain no NaN, but found NaN scores."),
    ],
)
def test_aggregated_checks_the_scores_before_it_learns(score: float, message: str) -> None:
    preds, clicks, positions, views = _session_with_an_item_not_shown()
    loss_fn = UnbiasedLambdaRankLoss(num_positions=4, momentum=0.0).double()
    bad = preds.clone()
    bad[0, 0] = score
    with pytest.raises(ValueError, match=re.escape(message)):
        loss_fn(bad, clicks, positions)
    with pytest.raises(ValueError, match=re.escape(message)):
        loss_fn.aggregated(bad, clicks[..., None] * views, views)
    assert torch.equal(loss_fn.statistics, torch.zeros(4, 4, dtype=torch.float64))
    # The next good batch learns as if the bad one never came.
    loss_fn.aggregated(preds, clicks[..., None] * views, views)
    assert loss_fn.statistics.isfinite().all()
    assert not torch.equal(loss_fn.t_plus, torch.ones(4, dtype=torch.float64))


def test_unchecked_debiased_loss_still_checks_the_mask_shape() -> None:
    loss_fn = UnbiasedLambdaRankLoss(num_positions=3, validate_args=False)
    preds, mask = torch.zeros(2, 3), torch.tensor([True, False, True])
    message = re.escape("Expected `mask` to have the shape of `preds` (2, 3), but got (3,).")
    with pytest.raises(ValueError, match=message):
        loss_fn.aggregated(preds, torch.zeros(2, 3, 3), torch.ones(2, 3, 3), mask)
    with pytest.raises(ValueError, match=message):
        loss_fn(preds, torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long), mask)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("momentum", 1.5, "Expected `momentum` to be in [0, 1], but got 1.5."),
        ("momentum", -0.1, "Expected `momentum` to be a non-negative finite float, but got -0.1."),
        ("bias_norm", -1, "Expected `bias_norm` to be a non-negative finite float, but got -1."),
    ],
)
def test_debiasing_options_are_checked_when_set(name: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        UnbiasedLambdaRankLoss(num_positions=3, **{name: value})
    loss_fn = UnbiasedLambdaRankLoss(num_positions=3)
    with pytest.raises(ValueError, match=re.escape(message)):
        setattr(loss_fn, name, value)
    setattr(loss_fn, name, 0.5)  # a good value is taken, and shown
    assert getattr(loss_fn, name) == 0.5
    assert f"{name}=0.5" in repr(loss_fn)


# --- 8. A weight too large for the dtype is named, not the hyper-parameter ---------------------

LOSSES = {
    "lambdarank": (LambdaRankLoss, "sigma", 1e38),
    "approx": (ApproxNDCGLoss, "temperature", 1e-20),
    "neural": (NeuralNDCGLoss, "temperature", 1e-37),
}


@pytest.mark.parametrize("loss", list(LOSSES))
def test_an_overflowing_weight_is_named(loss: str) -> None:
    module, name, bad_value = LOSSES[loss]
    gen = torch.Generator().manual_seed(8)
    preds, target = torch.randn(4, 8, generator=gen), torch.randint(0, 3, (4, 8), generator=gen)
    with pytest.raises(
        ValueError, match=r"Expected `weight` to keep the loss .* rescale `weight`"
    ):
        module()(preds, target, weight=torch.full((4, 8), 3e38))
    # Weights that fit are taken; a hyper-parameter that overflows alone is still named.
    assert module()(preds, target, weight=torch.full((4, 8), 1e30)).isfinite()
    with pytest.raises(ValueError, match=f"Expected `{name}` to keep the loss"):
        module(**{name: bad_value})(preds, target, weight=torch.ones(4, 8))


# --- 9. simulate_clicks never reads the positions of padded items ------------------------------


@pytest.mark.parametrize("model", ["position_based", "cascade"])
@pytest.mark.parametrize("examination", [None, torch.tensor([0.9, 0.6, 0.4, 0.3])])
@pytest.mark.parametrize("garbage", [99, -7])
def test_padded_items_positions_are_never_read(
    model: str, examination: torch.Tensor | None, garbage: int
) -> None:
    gen = torch.Generator().manual_seed(9)
    target = torch.randint(0, 5, (50, 4), generator=gen)
    positions = torch.rand(50, 4, generator=gen).argsort(-1)
    mask = torch.rand(50, 4, generator=gen) > 0.3
    options: dict[str, Any] = {"model": model, "examination": examination, "mask": mask}
    clean = torch.where(mask, positions, -1)
    expected = simulate_clicks(target, clean, generator=torch.Generator().manual_seed(0), **options)
    got = simulate_clicks(
        target,
        torch.where(mask, positions, garbage),
        generator=torch.Generator().manual_seed(0),
        **options,
    )
    assert torch.equal(got, expected)
    assert not got[~mask].any()
    if garbage < -1 or examination is not None:  # a real item's bad position: still an error
        with pytest.raises(ValueError, match="Expected `positions`"):
            simulate_clicks(target, torch.full_like(positions, garbage), **options)


# --- 6. Tied scores in the catalog paths: the same values, without merging every tie ----------


def _tied_catalog(pattern: str) -> tuple[torch.Tensor, ...]:
    """Scores of 6 users x 2,000 items, all equal or of three values; relevant, excluded ids."""
    users, n_items = 6, 2000
    gen = torch.Generator().manual_seed(6)
    if pattern == "all tied":
        scores = torch.zeros(users, n_items, dtype=torch.float64)
    else:  # three values, the best one rare (in other blocks for each user): the k-th best
        # is a tie of the middle value, and a block holds users above it and users tied with it
        scores = torch.randint(0, 2, (users, n_items), generator=gen).double()
        rare = torch.rand(users, n_items, generator=gen).argsort(-1)[:, :5]
        scores.scatter_(1, rare, 2.0)
        if pattern == "minus infinity":  # a user whose every score is -inf
            scores[3] = -torch.inf
    picks = torch.stack([torch.randperm(n_items, generator=gen) for _ in range(users)])
    relevant, excluded = picks[:, :5].clone(), picks[:, 5:40].clone()
    relevant[0] = torch.arange(5)  # the first items: inside the top k when all are tied
    excluded[1] = -1
    grades = torch.randint(1, 4, relevant.shape, generator=gen).double()
    target = torch.zeros(users, n_items, dtype=torch.float64)
    target.scatter_(1, relevant, grades)
    return scores, target, excluded


@pytest.mark.parametrize("pattern", ["all tied", "three values", "minus infinity"])
@pytest.mark.parametrize("ties", ["average", "first"])
def test_tied_scores_in_the_catalog_paths_equal_dense(pattern: str, ties: str) -> None:
    scores, target, excluded = _tied_catalog(pattern)
    users, n_items = scores.shape
    mask = torch.ones_like(scores, dtype=torch.bool).scatter_(1, excluded.clamp(min=0), False)
    mask[1] = True  # the user with nothing excluded
    sparse = target.to_sparse()

    def lookup(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return scores[q[:, 0].long()][:, x[:, 0].long()]

    for k in (3, [1, 10, 50]):
        expected = ndcg(scores, target, k=k, mask=mask, ties=ties)
        torch.testing.assert_close(ndcg(scores, sparse, k=k, exclude=excluded, ties=ties), expected)
        for chunk_size in (96, 512):  # multiples of 32: the selection path
            got = catalog_ndcg(
                torch.arange(users, dtype=torch.float64)[:, None],
                torch.arange(n_items, dtype=torch.float64)[:, None],
                sparse,
                k=k,
                exclude=excluded,
                score_fn=lookup,
                chunk_size=chunk_size,
                ties=ties,
            )
            torch.testing.assert_close(got, expected)


# --- 10. UnbiasedLambdaRankLoss: "mean" over the lists with a click; bad clicks named ----------


def _plus_one_gain(clicks: torch.Tensor) -> torch.Tensor:
    return clicks + 1.0


def _zero_at_the_top(ranks: torch.Tensor) -> torch.Tensor:
    return 1.0 - 1.0 / ranks


def _four_sessions() -> tuple[torch.Tensor, ...]:
    """Two lists with a click on an item shown, one without a click, one whose only click is on
    an item not shown (position -1): two lists with a click."""
    preds = torch.tensor(
        [[0.0, 1.0, 0.5], [0.3, -0.2, 0.9], [0.0, 1.0, 0.2], [0.4, 0.1, -0.5]],
        dtype=torch.float64,
    )
    clicks = torch.tensor([[1, 0, 0], [0, 1, 1], [0, 0, 0], [0, 0, 1]])
    positions = torch.tensor([[0, 1, 2], [2, 0, 1], [1, 0, 2], [0, 1, -1]])
    return preds, clicks, positions


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"gain": _plus_one_gain},
        {"gain": _plus_one_gain, "k": 2},
        # A discount that grows with the rank is refused by the checks: unchecked here.
        {"discount": _zero_at_the_top, "validate_args": False},
    ],
    ids=["exponential", "plus_one_gain", "plus_one_gain@2", "discount 0 at the top"],
)
def test_debiased_mean_is_over_the_lists_with_a_click_whatever_the_gain(
    options: dict[str, Any],
) -> None:
    """A gain positive at 0 gives a list without a click a positive ideal DCG (and a discount 0
    at the top a list with one click none): the mean still divides by the lists with a click on
    an item shown, as `aggregated` does on the sessions' counts."""
    preds, clicks, positions = _four_sessions()

    def losses(reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
        loss_fn = UnbiasedLambdaRankLoss(num_positions=3, reduction=reduction, **options)
        loss_fn = loss_fn.double().eval()
        shown = positions.ge(0)[..., None]
        views = torch.nn.functional.one_hot(positions.clamp(min=0), 3).double() * shown
        return (
            loss_fn(preds, clicks, positions),
            loss_fn.aggregated(preds, clicks[..., None] * views, views),
        )

    (forward_mean, aggregated_mean), (forward_sum, aggregated_sum) = (
        losses("mean"),
        losses("sum"),
    )
    assert forward_sum > 0
    assert aggregated_sum > 0
    torch.testing.assert_close(forward_mean, forward_sum / 2)
    torch.testing.assert_close(aggregated_mean, aggregated_sum / 2)


BAD_CLICKS = [
    (-1.0, "-1"),
    (2.0, "2"),
    (0.5, "0.5"),
    (math.nan, "nan"),
    (math.inf, "inf"),
]


@pytest.mark.parametrize(("value", "shown"), BAD_CLICKS, ids=[s for _, s in BAD_CLICKS])
@pytest.mark.parametrize("gain", ["exponential", _plus_one_gain], ids=["exponential", "callable"])
def test_a_bad_click_is_named_as_the_compiled_step_names_it(
    value: float, shown: str, gain: Any
) -> None:
    """Eagerly the check the compiled step asserts first (clicks of 0 or 1), with the value found;
    not the labels' check of `target`, an argument the loss does not have."""
    preds, clicks, positions = _four_sessions()
    bad = clicks.double()
    bad[1, 2] = value
    loss_fn = UnbiasedLambdaRankLoss(num_positions=3, gain=gain).double()
    message = f"Expected `clicks` to be 0 or 1 (a click or none), but found {shown}."
    with pytest.raises(ValueError, match=re.escape(message)):
        loss_fn(preds, bad, positions)
    # Padding's clicks are never checked.
    mask = torch.ones_like(clicks, dtype=torch.bool)
    mask[1, 2] = False
    assert loss_fn(preds, bad, positions, mask).isfinite()
    assert torch.equal(loss_fn.statistics.isfinite(), torch.ones(4, 3, dtype=torch.bool))


@pytest.mark.parametrize(
    ("clicks", "error", "message"),
    [
        ([[1, 0, 0]] * 4, TypeError, "Expected `clicks` to be a torch.Tensor, but got list."),
        (torch.zeros(4, 2), ValueError, "Expected `preds` and `clicks` to have the same shape"),
        (
            torch.zeros(4, 3, dtype=torch.complex64),
            TypeError,
            "Expected `clicks` to be a bool, int or float tensor",
        ),
    ],
    ids=["list", "shape", "complex"],
)
def test_clicks_of_the_wrong_type_or_shape_are_named(
    clicks: Any, error: type, message: str
) -> None:
    preds, _, positions = _four_sessions()
    for validate_args in (True, False):
        loss_fn = UnbiasedLambdaRankLoss(num_positions=3, validate_args=validate_args)
        with pytest.raises(error, match=re.escape(message)):
            loss_fn(preds, clicks, positions)


def _counts() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    preds = torch.tensor([[0.0, 1.0, 0.5], [0.3, -0.2, 0.9]])
    views = torch.tensor(
        [[[2.0, 1.0], [1.0, 2.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]
    )
    clicks = torch.tensor(
        [[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]]]
    )
    return preds, clicks, views


AGGREGATED_CASES = {
    # A negative view count: the item's views sum to 0 or less, so it is not ranked; checked
    # all the same (with a mask it went unnoticed).
    "negative view": (
        "views",
        (0, 2, 1),
        -1.0,
        "Expected `views` to be non-negative and finite, but found -1.",
    ),
    "negative click": (
        "clicks",
        (0, 0, 1),
        -1.0,
        "Expected `clicks` to be non-negative and finite, but found -1.",
    ),
    # An infinite click named `views`.
    "infinite click": (
        "clicks",
        (1, 2, 1),
        math.inf,
        "Expected `clicks` to be non-negative and finite, but found inf.",
    ),
    "infinite view": (
        "views",
        (1, 2, 1),
        math.inf,
        "Expected `views` to be non-negative and finite, but found inf.",
    ),
    "NaN view": (
        "views",
        (1, 0, 0),
        math.nan,
        "Expected `views` to contain no NaN, but found NaN counts.",
    ),
    "clicks above views": (
        "clicks",
        (0, 0, 1),
        3.0,
        "Expected `clicks` to be at most `views`, but found clicks above views by 2.",
    ),
}


@pytest.mark.parametrize("masked", [False, True], ids=["no mask", "mask"])
@pytest.mark.parametrize("case", list(AGGREGATED_CASES))
def test_aggregated_names_the_count_at_fault(case: str, masked: bool) -> None:
    name, index, value, message = AGGREGATED_CASES[case]
    preds, clicks, views = _counts()
    counts = {"clicks": clicks, "views": views}
    counts[name] = counts[name].clone()
    counts[name][index] = value
    mask = torch.ones(2, 3, dtype=torch.bool) if masked else None
    loss_fn = UnbiasedLambdaRankLoss(num_positions=2)
    with pytest.raises(ValueError, match=re.escape(message)):
        loss_fn.aggregated(preds, counts["clicks"], counts["views"], mask)
    assert torch.equal(loss_fn.statistics, torch.zeros(4, 2))
    # On a padded item the same count is never read.
    padding = torch.ones(2, 3, dtype=torch.bool)
    padding[index[:2]] = False
    expected = loss_fn.aggregated(preds, clicks, views, padding)
    torch.testing.assert_close(
        UnbiasedLambdaRankLoss(num_positions=2).aggregated(
            preds, counts["clicks"], counts["views"], padding
        ),
        expected,
    )


@needs_torch_2_13_to_compile_losses
def test_compiled_aggregated_names_the_count_eager_names() -> None:
    """The device-side assertions carry eager's expectation (the value: "a value")."""
    _, index, value, message = AGGREGATED_CASES["infinite click"]
    preds, clicks, views = _counts()
    clicks[index] = value
    torch._dynamo.reset()
    compiled = torch.compile(
        UnbiasedLambdaRankLoss(num_positions=2).aggregated, backend="aot_eager"
    )
    expectation = message.split(", but found")[0]
    with pytest.raises(RuntimeError, match=re.escape(expectation + ", but found a value.")):
        compiled(preds, clicks, views)
