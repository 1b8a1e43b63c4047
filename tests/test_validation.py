"""Every bad input gets an error that names the argument and what was given."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch

from torch_ndcg import (
    NDCG,
    RetrievalNDCG,
    UnbiasedLambdaRankLoss,
    approx_ndcg_loss,
    catalog_ndcg,
    dcg,
    lambdarank_loss,
    ndcg,
    neural_ndcg_loss,
    pl_rank_loss,
    retrieval_ndcg,
    softmax_loss,
    xe_ndcg_loss,
)

PREDS = torch.tensor([[0.3, 0.2, 0.1]])
TARGET = torch.tensor([[1, 0, 2]])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"k": 0}, ValueError, r"`k` to be a positive int.*but got 0"),
        ({"k": -3}, ValueError, r"`k`.*but got -3"),
        ({"k": True}, ValueError, r"`k`.*but got True"),
        ({"k": 2.0}, ValueError, r"`k`.*but got 2.0"),
        ({"k": []}, ValueError, r"`k`.*but got \[\]"),
        ({"k": [1, 0]}, ValueError, r"`k`.*but got \[1, 0\]"),
        ({"k": "5"}, ValueError, r"`k`.*but got '5'"),
        (
            {"gain": "exp"},
            ValueError,
            r"`gain` to be one of 'exponential', 'linear', a callable or a sequence of .*, "
            r"but got 'exp'",
        ),
        (
            {"discount": "log"},
            ValueError,
            r"`discount` to be one of 'log2', 'jarvelin' or a callable, but got 'log'",
        ),
        (
            {"ties": "random"},
            ValueError,
            r"`ties` to be one of 'average', 'first', but got 'random'",
        ),
        ({"ties": len}, ValueError, r"`ties` to be one of 'average', 'first', but got <built-in"),
        ({"ignore_index": 1.5}, TypeError, r"`ignore_index` to be an int or None, but got 1.5"),
        (
            {"mask": [[True, True, True]]},
            TypeError,
            r"`mask` to be a bool torch.Tensor or None, but got list",
        ),
        (
            {"mask": torch.ones(1, 3)},
            TypeError,
            r"`mask` to have dtype torch.bool, but got torch.float32",
        ),
        (
            {"mask": torch.ones(3, dtype=torch.bool)},
            ValueError,
            r"`mask` to have the shape of `preds` \(1, 3\), but got \(3,\)",
        ),
    ],
)
@pytest.mark.parametrize("fn", [dcg, ndcg])
def test_bad_options(fn: Any, kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        fn(PREDS, TARGET, **kwargs)


def test_bad_empty_target_action() -> None:
    with pytest.raises(
        ValueError,
        match=r"`empty_target_action` to be one of 'neg', 'pos', 'skip', 'error', but got 'zero'",
    ):
        ndcg(PREDS, TARGET, empty_target_action="zero")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("preds", "target", "error", "message"),
    [
        ([0.1, 0.2], TARGET, TypeError, r"`preds` to be a torch.Tensor, but got list"),
        (PREDS, [1, 0, 2], TypeError, r"`target` to be a torch.Tensor, but got list"),
        (
            torch.tensor([[3, 2, 1]]),
            TARGET,
            TypeError,
            r"`preds` to be a floating tensor, but got dtype torch.int64",
        ),
        (
            PREDS,
            TARGET.to(torch.complex64),
            TypeError,
            r"`target` to be a bool, int or float tensor, but got torch.complex64",
        ),
        (
            PREDS,
            torch.tensor([1, 0, 2]),
            ValueError,
            r"`preds` and `target` to have the same shape, but got \(1, 3\) and \(3,\)",
        ),
        (torch.tensor(0.5), torch.tensor(1), ValueError, r"at least 1-D\), but got a 0-d tensor"),
        (
            torch.zeros(2, 0),
            torch.zeros(2, 0),
            ValueError,
            r"non-empty last \(list\) dimension, but `preds` has shape \(2, 0\)",
        ),
        (
            torch.tensor([[0.1, float("nan"), 0.3]]),
            TARGET,
            ValueError,
            r"`preds` to contain no NaN",
        ),
        (
            PREDS,
            torch.tensor([[1.0, float("nan"), 0.0]]),
            ValueError,
            r"`target` to contain no NaN",
        ),
        (
            PREDS,
            torch.tensor([[1, -1, 0]]),
            ValueError,
            r"`target` to be non-negative, but found the value -1",
        ),
        (
            PREDS,
            torch.tensor([[1.0, -0.5, 0.0]]),
            ValueError,
            r"`target` to be non-negative, but found the value -0.5",
        ),
        (
            PREDS,
            torch.tensor([[1, 200, 0]]),
            ValueError,
            r"`target` values of at most 127.99 with `gain`='exponential'.*found 200",
        ),
    ],
)
def test_bad_tensors(preds: Any, target: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        ndcg(preds, target)


def test_negative_label_other_than_ignore_index_is_named() -> None:
    with pytest.raises(
        ValueError, match=r"non-negative other than `ignore_index`=-1, but found the value -2"
    ):
        ndcg(PREDS, torch.tensor([[1, -1, -2]]), ignore_index=-1)


def test_large_labels_fine_with_linear_gain_or_float64() -> None:
    target = torch.tensor([[1, 200, 0]])
    assert torch.isfinite(ndcg(PREDS, target, gain="linear")).all()
    assert torch.isfinite(ndcg(PREDS.double(), target)).all()
    with pytest.raises(ValueError, match=r"at most 1022.41 .*a list.s 3 gains"):
        ndcg(PREDS.double(), torch.tensor([[1, 2000, 0]]))


def test_nan_scores_and_negative_labels_of_padded_items_are_allowed() -> None:
    preds = torch.tensor([[0.3, float("nan"), 0.1]])
    target = torch.tensor([[1, -7, 2]])
    mask = torch.tensor([[True, False, True]])
    # Real items: label 1 ranked first, label 2 second; exponential gains 1 and 3.
    expected = (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))
    assert ndcg(preds, target, mask=mask).item() == pytest.approx(expected, abs=1e-6)


def test_validate_args_false_skips_value_checks() -> None:
    """The checks that read values are skipped (a NaN score, a negative label: no error),
    and nothing else changes: valid input gives the checked call's value."""
    preds = torch.tensor([[0.3, float("nan"), 0.1]])
    with pytest.raises(ValueError, match="NaN"):
        ndcg(preds, TARGET)
    assert ndcg(preds, TARGET, validate_args=False).shape == (1,)
    negative = torch.tensor([[1, -3, 2]])
    with pytest.raises(ValueError, match="non-negative"):
        ndcg(PREDS, negative)
    assert ndcg(PREDS, negative, validate_args=False).shape == (1,)
    for k in (None, 2, [1, 3]):
        checked = ndcg(PREDS, TARGET, k=k)
        assert torch.equal(ndcg(PREDS, TARGET, k=k, validate_args=False), checked)
    # Exponential gains 1, 0, 3 at ranks 1, 2, 3 against the ideal 3, 1, 0.
    expected = (1 + 3 / math.log2(4)) / (3 + 1 / math.log2(3))
    assert ndcg(PREDS, TARGET, validate_args=False).item() == pytest.approx(expected, abs=1e-6)


def test_infinite_labels_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"`target` to be finite, but found inf"):
        ndcg(PREDS, torch.tensor([[1.0, float("inf"), 0.0]]), gain="linear")


def test_swapped_float_scores_and_labels_get_a_hint() -> None:
    """Float labels passed first and scores second: whole-number "scores" from 0 to 3 and
    fractional "labels" are the signs, read with the value checks (no read-back of their own)."""
    gen = torch.Generator().manual_seed(0)
    scores = torch.rand(5, 8, generator=gen)
    labels = torch.randint(0, 4, (5, 8), generator=gen).float()
    with pytest.warns(UserWarning, match="were scores and labels swapped"):
        ndcg(labels, scores, k=3)
    with pytest.warns(UserWarning, match="whole numbers from 0 to 3"):
        NDCG(k=3).update(labels, scores)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ndcg(scores, labels, k=3)  # the right order
        ndcg(labels, labels)  # whole-number scores with whole-number labels: plausible
        ndcg(labels + 40, scores)  # whole scores, but not label-like ones
        ndcg(labels, scores, validate_args=False)  # no value is read: no hint


def test_a_label_past_the_gain_limit_names_the_sum_only_where_gains_are_summed() -> None:
    # Lists sum their gains; flat rows are checked one by one (a query's sum when it is scored).
    preds, target = torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[200, 0, 1]])
    with pytest.raises(ValueError, match=r"finite in torch.float32 and a list's 3 gains must sum"):
        ndcg(preds, target)
    indexes = torch.zeros(3, dtype=torch.long)
    for call in (
        lambda: retrieval_ndcg(preds.reshape(-1), target.reshape(-1), indexes),
        lambda: RetrievalNDCG().update(preds.reshape(-1), target.reshape(-1), indexes),
    ):
        with pytest.raises(ValueError, match=r"finite in torch.float32\), but found 200") as error:
            call()
        assert "gains must sum" not in str(error.value)


# --- A callable gain: what it gives the real labels is checked -----------------------------

_OWNERS_OF_GAIN = {
    "ndcg": lambda p, t, **o: ndcg(p, t, **o),
    "NDCG.update": lambda p, t, **o: NDCG(**o).update(p, t),
    "retrieval_ndcg": lambda p, t, **o: retrieval_ndcg(
        p.reshape(-1), t.reshape(-1), torch.arange(t.numel()) // t.shape[-1], **o
    ),
    "softmax_loss": lambda p, t, **o: softmax_loss(p, t, **o),
    "xe_ndcg_loss": lambda p, t, **o: xe_ndcg_loss(p, t, noise=torch.full_like(p, 0.5), **o),
    "lambdarank_loss": lambda p, t, **o: lambdarank_loss(p, t, **o),
}
_BAD_GAINS = {
    "negative": (lambda y: y - 1, r"non-negative gains of the real labels.*gave the gain -1\.0"),
    "infinite": (lambda y: torch.exp(y * 1000), r"non-negative gains.*gave the gain inf"),
    "NaN": (lambda y: y / 0 * 0, r"non-negative gains.*gave the gain nan"),
    "a scalar": (lambda y: y.sum(), r"`gain` to give a tensor of the shape .*gave shape \(\)"),
    "an array": (lambda y: y.numpy(), r"`gain` to give a tensor of the shape .*gave <class"),
}


@pytest.mark.parametrize("bad", list(_BAD_GAINS))
@pytest.mark.parametrize("owner", list(_OWNERS_OF_GAIN))
def test_a_callable_gain_that_gives_bad_gains_is_named(owner: str, bad: str) -> None:
    preds = torch.tensor([[0.3, 0.1, 0.2, 0.9], [0.5, 0.9, 0.1, 0.4]])
    target = torch.tensor([[2, 0, 1, 0], [1, 0, 3, 2]])
    gain, message = _BAD_GAINS[bad]
    with pytest.raises(ValueError, match=message):
        _OWNERS_OF_GAIN[owner](preds, target, gain=gain)
    # Only the real labels' gains are checked: on labels 1 to 3, a gain negative at 0 (the
    # label padding takes inside) is valid, as unchecked.
    stars = target + 1
    padded = stars.masked_fill(target == 0, -1)

    def from_one(y: torch.Tensor) -> torch.Tensor:
        return torch.exp2(y - 1) - 1

    checked = _OWNERS_OF_GAIN[owner](preds, padded, gain=from_one, ignore_index=-1)
    unchecked = _OWNERS_OF_GAIN[owner](
        preds, padded, gain=from_one, ignore_index=-1, validate_args=False
    )
    if checked is not None:  # NDCG.update returns nothing
        torch.testing.assert_close(checked, unchecked)
    with pytest.raises(ValueError, match=r"gave the gain -0\.5"):
        _OWNERS_OF_GAIN[owner](preds, target, gain=from_one)


@pytest.mark.parametrize("owner", ["softmax_loss", "lambdarank_loss"])
def test_a_losss_callable_gain_is_checked_in_the_dtype_it_is_computed_in(owner: str) -> None:
    # The losses take gains in float64: e^100 is finite there (in float32 it is not).
    preds = torch.tensor([[0.3, 0.1, 0.2, 0.9]])
    target = torch.tensor([[100.0, 0.0, 50.0, 1.0]])
    checked = _OWNERS_OF_GAIN[owner](preds, target, gain=torch.exp)
    unchecked = _OWNERS_OF_GAIN[owner](preds, target, gain=torch.exp, validate_args=False)
    assert torch.isfinite(checked)
    torch.testing.assert_close(checked, unchecked)


# --- A callable discount: what it gives the ranks is checked ------------------------------


def _log2(ranks: torch.Tensor) -> torch.Tensor:
    return 1 / torch.log2(ranks + 1)


_OWNERS_OF_DISCOUNT = {
    "ndcg": lambda p, t, **o: ndcg(p, t, **o),
    "dcg": lambda p, t, **o: dcg(p, t, **o),
    "ndcg (sparse)": lambda p, t, **o: ndcg(p, t.to_sparse(), **o),
    "catalog_ndcg": lambda p, t, **o: catalog_ndcg(
        p, torch.eye(5), t.to_sparse(), **{"k": None, **o}
    ),
    "NDCG": lambda p, t, **o: NDCG(**o)(p, t),
    "retrieval_ndcg": lambda p, t, **o: retrieval_ndcg(
        p.reshape(-1), t.reshape(-1), torch.arange(t.numel()) // t.shape[-1], **o
    )[0],
    "RetrievalNDCG": lambda p, t, **o: RetrievalNDCG(**o)(
        p.reshape(-1), t.reshape(-1), torch.arange(t.numel()) // t.shape[-1]
    ),
    "lambdarank_loss": lambda p, t, **o: lambdarank_loss(p, t, **o),
    "approx_ndcg_loss": lambda p, t, **o: approx_ndcg_loss(p, t, **o),
    "neural_ndcg_loss": lambda p, t, **o: neural_ndcg_loss(p, t, **o),
    "pl_rank_loss": lambda p, t, **o: pl_rank_loss(
        p, t, num_samples=4, generator=torch.Generator().manual_seed(0), **o
    ),
    "NDCG.update_catalog": lambda p, t, **o: _catalog_metric(p, t, **o),
    "UnbiasedLambdaRankLoss.aggregated": lambda p, t, **o: _aggregated(p, t, **o),
}


def _catalog_metric(preds: torch.Tensor, target: torch.Tensor, **options: Any) -> torch.Tensor:
    metric = NDCG(**{"k": None, **options})
    metric.update_catalog(preds, torch.eye(preds.shape[-1]), target.to_sparse())
    return metric.compute()


def _aggregated(preds: torch.Tensor, target: torch.Tensor, **options: Any) -> torch.Tensor:
    """One session per list, each item shown at its place and clicked where relevant."""
    views = torch.eye(preds.shape[-1]).expand(*preds.shape, -1)
    clicks = views * (target > 0)[..., None]
    loss = UnbiasedLambdaRankLoss(num_positions=preds.shape[-1], **options)
    return loss.aggregated(preds.float(), clicks, views)


class _CountedDiscount:
    """A log2 discount that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, ranks: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return _log2(ranks)


_STATED = r"`discount` to give finite, non-negative discounts, positive at rank 1 and never growing"
_BAD_DISCOUNTS = {
    "NaN": (lambda r: r * math.nan, _STATED + r".*gave nan at rank 1\."),
    "NaN at rank 5": (
        lambda r: torch.where(r == 5, math.nan, _log2(r)),
        r"nan at rank 5 after 0\.43",
    ),
    "0 everywhere": (torch.zeros_like, r"gave 0 at rank 1\."),
    "inf at rank 1": (lambda r: 1 / (r - 1), r"gave inf at rank 1\."),
    "negative": (lambda r: -_log2(r), r"gave -1 at rank 1\."),
    "growing": (lambda r: r, r"gave 2 at rank 2 after 1\."),
    "0 at the top": (lambda r: 1 - 1 / r, r"gave 0 at rank 1\."),
    "a row": (lambda r: _log2(r)[None], r"`discount` to give a tensor of the shape of the ranks"),
    "a scalar": (
        lambda r: torch.tensor(0.5),
        r"of the ranks it is given, \(\d+,\), but it gave shape \(\)",
    ),
    "a float": (lambda r: 0.5, r"but it gave <class 'float'>"),
}


@pytest.mark.parametrize("bad", list(_BAD_DISCOUNTS))
@pytest.mark.parametrize("owner", list(_OWNERS_OF_DISCOUNT))
def test_a_callable_discount_unfit_for_ndcg_is_named(owner: str, bad: str) -> None:
    """NaN, inf, negative, 0 at the top, growing or misshapen discounts gave 0, 1, NaN, nDCG
    above 1 clamped to 1, a broadcast number or an error from deep inside."""
    preds = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5]])
    target = torch.tensor([[3, 2, 3, 0, 1], [1, 0, 0, 2, 0]])
    discount, message = _BAD_DISCOUNTS[bad]
    with pytest.raises(ValueError, match=message):
        _OWNERS_OF_DISCOUNT[owner](preds, target, discount=discount)


@pytest.mark.parametrize("owner", list(_OWNERS_OF_DISCOUNT))
def test_a_callable_discount_fit_for_ndcg_is_the_named_one_where_it_is_one(owner: str) -> None:
    preds = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5]])
    target = torch.tensor([[3, 2, 3, 0, 1], [1, 0, 0, 2, 0]])
    call = _OWNERS_OF_DISCOUNT[owner]
    torch.testing.assert_close(call(preds, target, discount=_log2), call(preds, target))
    # A cut-off written as a discount (0 past rank 2) and a flat one are fit: non-increasing.
    for fit in (lambda r: (r <= 2) * _log2(r), torch.ones_like):
        assert torch.isfinite(call(preds, target, discount=fit)).all()
    # Unchecked, the discount is not called on ranks of its own first: once fewer.
    checked, unchecked = _CountedDiscount(), _CountedDiscount()
    call(preds, target, discount=checked)
    call(preds, target, discount=unchecked, validate_args=False)
    assert checked.calls == unchecked.calls + 1


_METRICS_OF_DISCOUNT = [
    name for name in _OWNERS_OF_DISCOUNT if not name.endswith(("loss", ".aggregated"))
]


@pytest.mark.parametrize("owner", _METRICS_OF_DISCOUNT)
@pytest.mark.parametrize("k", [2, [1, 3]])
def test_a_metrics_callable_discount_is_asked_only_for_the_ranks_k_counts(
    owner: str, k: int | list[int]
) -> None:
    # A table of discounts as long as the largest cut-off serves a metric.
    table = _log2(torch.arange(1.0, 4.0))
    asked: list[int] = []

    def tabled(ranks: torch.Tensor) -> torch.Tensor:
        asked.append(ranks.numel())
        return table[: ranks.numel()].reshape(ranks.shape)

    preds = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5]])
    target = torch.tensor([[3, 2, 3, 0, 1], [1, 0, 0, 2, 0]])
    call = _OWNERS_OF_DISCOUNT[owner]
    torch.testing.assert_close(call(preds, target, k=k, discount=tabled), call(preds, target, k=k))
    assert asked  # the check's ranks and the engine's: to the largest k
    assert max(asked) == (3 if isinstance(k, list) else 2)


def test_a_retrieval_discount_is_asked_for_the_longest_querys_ranks_in_float32() -> None:
    # Float16 rows past its largest number (65,504) would make ranks of inf: the ranks are
    # asked in float32, and only as many as the longest query has (10, not 70,000).
    rows = 70_000
    preds = torch.linspace(0, 1, rows).half()
    target = (torch.arange(rows) % 3 == 0).long()
    indexes = torch.arange(rows) // 10
    asked: list[tuple[int, torch.dtype]] = []

    def discount(ranks: torch.Tensor) -> torch.Tensor:
        asked.append((ranks.numel(), ranks.dtype))
        return _log2(ranks)

    values = retrieval_ndcg(preds, target, indexes, discount=discount)[0]
    torch.testing.assert_close(values, retrieval_ndcg(preds, target, indexes)[0])
    assert asked[0] == (10, torch.float32)
    assert max(numel for numel, _ in asked) <= rows // 7_000


def test_a_discount_that_answers_on_another_device_is_left_to_the_engine() -> None:
    calls: list[torch.Tensor] = []

    def elsewhere_first(ranks: torch.Tensor) -> torch.Tensor:  # the check's ranks: on "meta"
        calls.append(ranks)
        return _log2(ranks).to("meta") if len(calls) == 1 else _log2(ranks)

    preds, target = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5]]), torch.tensor([[3, 2, 3, 0, 1]])
    torch.testing.assert_close(ndcg(preds, target, discount=elsewhere_first), ndcg(preds, target))
    assert calls[0].device.type == "cpu"


def test_a_discount_of_another_devices_tensors_is_left_to_the_engine() -> None:
    # The check asks the discount on CPU ranks: one that cannot take them is not judged there.
    calls: list[torch.Tensor] = []

    def meta_only(ranks: torch.Tensor) -> torch.Tensor:  # it fails the check's ranks only
        calls.append(ranks)
        if len(calls) == 1:
            raise RuntimeError("Expected all tensors to be on the same device")
        return _log2(ranks)

    preds, target = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5]]), torch.tensor([[3, 2, 3, 0, 1]])
    torch.testing.assert_close(
        lambdarank_loss(preds, target, discount=meta_only), lambdarank_loss(preds, target)
    )
