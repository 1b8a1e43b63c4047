"""Every option of the nDCG metric entry points, each value against something independent.

The entry points: `ndcg`, `dcg`, `retrieval_ndcg`, `NDCG` (``update``, ``forward``,
``compute``, ``confidence``, ``update_catalog``), `RetrievalNDCG` (every ``aggregation``, with
and without ``confidence``, ``bootstrap_resamples``, ``bootstrap_seed``) and `catalog_ndcg`.
Each value of each option is compared with the loop references of `tests.references`, a peer
(scikit-learn, torchmetrics, scipy) or a formula written in the test, never with another part
of torch_ndcg: an option silently read as another value, or as its default, in a function and
its module alike, fails here. tests/README.md maps each option to its test.

The data are small and seeded: scores drawn from four values (ties everywhere, also across the
cut-offs), labels 0..4 (so that the exponential and linear gains differ), a list with no
relevant item, a list of padding only, and padded items that score +inf or NaN (an ignored
padding would take the top ranks).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn.metrics import dcg_score, ndcg_score
from torch import Tensor
from torchmetrics.retrieval import RetrievalNormalizedDCG

from tests import references as ref
from torch_ndcg import NDCG, RetrievalNDCG, catalog_ndcg, dcg, ndcg, retrieval_ndcg

# ---------------------------------------------------------------------------------------------
# Option values and their reference twins


def square_plus(y: Any) -> Any:
    """A callable gain, ``y^2 + y``: neither 2^y - 1 nor y on labels above 1; 0 at 0."""
    return y * y + y


def reciprocal(rank: Any) -> Any:
    """A callable discount, ``1 / r``: neither log2 (0.63 at rank 2) nor Järvelin (1 there)."""
    return 1.0 / rank


def mean_of_squares(values: Tensor, dim: int | None = None) -> Tensor:
    """A callable aggregation (``dim`` is torchmetrics' keyword): the mean of the squares."""
    return (values * values).mean()


def name_of(value: Any) -> str:
    """A test id: a callable's name, or the value."""
    return getattr(value, "__name__", str(value))


EMPTY_VALUES = {"neg": 0.0, "pos": 1.0, "skip": math.nan, "error": 0.0}
LIST_MESSAGE = (
    "Found a list with no relevant item (ideal DCG = 0) and `empty_target_action`='error'."
)
QUERY_MESSAGE = (
    "Found a query with no relevant item (ideal DCG = 0) and `empty_target_action`='error'."
)
USER_MESSAGE = (
    "Found a user with no relevant item (ideal DCG = 0) and `empty_target_action`='error'."
)


def reference_options(options: dict[str, Any]) -> dict[str, Any]:
    """The loop references' keywords for the package's ``gain``, ``discount``, ``ties``."""
    gain = options.get("gain", "exponential")
    discount = options.get("discount", "log2")
    return {
        "gain": ref.GAINS[gain] if isinstance(gain, str) else gain,
        "discount": ref.DISCOUNTS[discount] if isinstance(discount, str) else discount,
        "ties": options.get("ties", "average"),
    }


def cutoffs(k: Any) -> tuple[list[int | None], bool]:
    """``k`` as the list of cut-offs to compute and whether the result has a ``len(k)`` dim."""
    if k is None or isinstance(k, int):
        return [k], False
    return list(k), True


def names(k: Any) -> list[str]:
    ks, _ = cutoffs(k)
    return ["ndcg" if cut is None else f"ndcg@{cut}" for cut in ks]


def as_array(value: Any, k: Any) -> np.ndarray:
    """A result (a tensor, or a metric's dict by cut-off) as a float64 array, cut-offs last."""
    if isinstance(value, dict):
        return np.stack([value[name].double().numpy() for name in names(k)], axis=-1)
    return value.double().numpy()


def close(got: Any, expected: Any, atol: float = 1e-9) -> None:
    np.testing.assert_allclose(
        np.asarray(got, dtype=np.float64),
        np.asarray(expected, dtype=np.float64),
        rtol=0,
        atol=atol,
        equal_nan=True,
    )


def counted_mean(values: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """Mean over axis 0 of the counted, non-NaN values (0 where none), written out."""
    keep = counted[:, None] & ~np.isnan(values) if values.ndim == 2 else counted & ~np.isnan(values)
    total = np.where(keep, values, 0.0).sum(0)
    return total / np.maximum(keep.sum(0), 1)


# ---------------------------------------------------------------------------------------------
# Padded lists: `ndcg`, `dcg`, `NDCG`, and the same lists as query rows


@dataclass
class Lists:
    scores: np.ndarray  # [N, L]; padded items score +inf (even columns) or NaN (odd columns)
    labels: np.ndarray  # [N, L] ints 0..4 (padded items keep a label: ignoring a mask shows)
    real: np.ndarray  # [N, L] bool


def make_lists(seed: int, n_lists: int = 24, length: int = 7, *, padded: bool = True) -> Lists:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, (n_lists, length)).astype(np.float64)
    labels = rng.integers(0, 5, (n_lists, length))
    real = rng.random((n_lists, length)) > 0.3 if padded else np.ones((n_lists, length), bool)
    real[:, 0] = True
    labels[0] = 0  # real items, none relevant: an empty target
    if padded:
        real[1] = False  # a list of padding only: no list
        real[2, -2:] = False
        labels[2] = np.where(real[2], 0, 3)  # relevant only on padding: an empty target too
        columns = np.arange(length)[None, :].repeat(n_lists, 0)
        scores = np.where(real, scores, np.where(columns % 2 == 0, np.inf, np.nan))
    return Lists(scores, labels, real)


def without_empty_targets(data: Lists) -> Lists:
    """The lists that have a relevant real item, and the list of padding only."""
    keep = [i for i in range(data.real.shape[0]) if not data.real[i].any()]
    keep += [i for i in range(data.real.shape[0]) if (data.labels[i] * data.real[i]).any()]
    keep.sort()
    return Lists(data.scores[keep], data.labels[keep], data.real[keep])


def list_inputs(data: Lists, padding: str) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """``preds``, ``target`` and the padding keywords: by ``mask``, ``ignore_index`` or both.

    With ``"both"`` the padded items of even columns are marked by the mask and those of odd
    columns by the label -1.
    """
    preds = torch.tensor(data.scores)
    labels = data.labels.copy()
    padded = ~data.real
    if padding == "none":
        assert data.real.all()
        return preds, torch.tensor(labels), {}
    columns = np.arange(labels.shape[1])[None, :]
    by_label = {"mask": np.zeros_like(padded), "ignore_index": padded, "both": padded}[padding]
    if padding == "both":
        by_label = padded & (columns % 2 == 1)
    labels = np.where(by_label, -1, labels)
    keywords: dict[str, Any] = {}
    if padding in ("mask", "both"):
        keywords["mask"] = torch.tensor(~(padded & ~by_label))
    if padding in ("ignore_index", "both"):
        keywords["ignore_index"] = -1
    return preds, torch.tensor(labels), keywords


def reference_lists(data: Lists, options: dict[str, Any], *, normalize: bool = True) -> np.ndarray:
    """Per-list values ``[N]`` or ``[N, len(k)]`` by the loop references."""
    ks, is_sequence = cutoffs(options.get("k"))
    keywords = reference_options(options)
    columns = []
    for cut in ks:
        if normalize:
            empty = EMPTY_VALUES[options.get("empty_target_action", "neg")]
            columns.append(
                ref.ndcg_padded_batch(
                    data.scores.tolist(),
                    data.labels.tolist(),
                    data.real.tolist(),
                    cut,
                    empty_value=empty,
                    **keywords,
                )
            )
        else:
            columns.append(
                ref.dcg_padded_batch(
                    data.scores.tolist(), data.labels.tolist(), data.real.tolist(), cut, **keywords
                )
            )
    values = np.array(columns, dtype=np.float64).T
    return values if is_sequence else values[:, 0]


def split(case: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A case's package options and its padding."""
    options = dict(case)
    padding = options.pop("padding", "both")
    return options, padding


# One option at a time, away from the base (k=[2, 5], padding by mask and ignore_index).
BASE: dict[str, Any] = {"k": [2, 5]}
LIST_CASES: list[tuple[str, dict[str, Any]]] = [
    ("k=None", {"k": None}),
    ("k=3", {"k": 3}),
    ("k=[5,1,3]", {"k": [5, 1, 3]}),
    ("k=10 (> L)", {"k": 10}),
    ("k=[9,2]", {"k": [9, 2]}),
    ("gain=exponential", {"gain": "exponential"}),
    ("gain=linear", {"gain": "linear"}),
    ("gain=callable", {"gain": square_plus}),
    ("discount=log2", {"discount": "log2"}),
    ("discount=jarvelin", {"discount": "jarvelin"}),
    ("discount=callable", {"discount": reciprocal}),
    ("ties=average", {"ties": "average"}),
    ("ties=first", {"ties": "first"}),
    ("empty=neg", {"empty_target_action": "neg"}),
    ("empty=pos", {"empty_target_action": "pos"}),
    ("empty=skip", {"empty_target_action": "skip"}),
    ("padding=none", {"padding": "none"}),
    ("padding=mask", {"padding": "mask"}),
    ("padding=ignore_index", {"padding": "ignore_index"}),
    ("padding=both", {"padding": "both"}),
    ("validate_args=False", {"validate_args": False}),
    ("combined", {"k": [4, 1], "gain": "linear", "discount": "jarvelin", "ties": "first"}),
]
LIST_CASE_IDS = [name for name, _ in LIST_CASES]
LIST_CASE_VALUES = [{**BASE, **case} for _, case in LIST_CASES]


def lists_for(case: dict[str, Any], seed: int = 0) -> Lists:
    _, padding = split(case)
    return make_lists(seed, padded=padding != "none")


@pytest.mark.parametrize("case", LIST_CASE_VALUES, ids=LIST_CASE_IDS)
def test_ndcg_option_against_loop_reference(case: dict[str, Any]) -> None:
    options, padding = split(case)
    data = lists_for(case)
    preds, target, keywords = list_inputs(data, padding)
    got = ndcg(preds, target, **keywords, **options)
    close(got, reference_lists(data, options))


@pytest.mark.parametrize("case", LIST_CASE_VALUES, ids=LIST_CASE_IDS)
def test_dcg_option_against_loop_reference(case: dict[str, Any]) -> None:
    options, padding = split(case)
    if "empty_target_action" in options:
        pytest.skip("dcg has no ideal DCG: no `empty_target_action`")
    data = lists_for(case)
    preds, target, keywords = list_inputs(data, padding)
    got = dcg(preds, target, **keywords, **options)
    close(got, reference_lists(data, options, normalize=False))


@pytest.mark.parametrize("case", LIST_CASE_VALUES, ids=LIST_CASE_IDS)
def test_ndcg_metric_option_against_loop_reference(case: dict[str, Any]) -> None:
    """``forward`` gives its batch's mean, ``compute`` that of every batch, padding uncounted."""
    options, padding = split(case)
    data = lists_for(case)
    preds, target, keywords = list_inputs(data, padding)
    k = options.pop("k")
    expected = reference_lists(data, {**options, "k": k})
    counted = data.real.any(1)
    metric = NDCG(k, ignore_index=keywords.get("ignore_index"), **options)
    first = slice(0, 10)
    mask = keywords.get("mask")
    batch = metric(preds[first], target[first], None if mask is None else mask[first])
    close(as_array(batch, k), counted_mean(expected[first], counted[first]), atol=1e-6)
    rest = slice(10, None)
    metric.update(preds[rest], target[rest], None if mask is None else mask[rest])
    close(as_array(metric.compute(), k), counted_mean(expected, counted), atol=1e-6)


def query_rows(
    data: Lists, padding: str, seed: int
) -> tuple[Tensor, Tensor, Tensor, list[float], list[float], list[int]]:
    """The lists as flat rows, queries interleaved (each keeps its own row order).

    Query ``i`` gets the id ``(i - 7) * 10**11 + 3`` (negative, huge, sparse). Padded rows
    are left out, or, where the padding is by label, given as rows with the label -1. Also
    returns the rows that count (scores, labels, ids) for `references.ndcg_per_query`.
    """
    n_lists, length = data.scores.shape
    ids = np.repeat((np.arange(n_lists) - 7) * 10**11 + 3, length)
    scores, labels, real = data.scores.reshape(-1), data.labels.reshape(-1), data.real.reshape(-1)
    by_label = padding in ("ignore_index", "both")
    rows = np.ones_like(real) if by_label else real
    order = np.random.default_rng(seed).permutation(int(rows.sum()))
    picked = np.nonzero(rows)[0]
    shuffled_ids = ids[picked][order]
    placed = np.empty_like(picked)
    for query in np.unique(shuffled_ids):  # each query's rows in their own order
        placed[np.nonzero(shuffled_ids == query)[0]] = picked[ids[picked] == query]
    flat_labels = np.where(real[placed], labels[placed], -1)
    kept = real[placed]
    return (
        torch.tensor(scores[placed]),
        torch.tensor(flat_labels),
        torch.tensor(ids[placed]),
        scores[placed][kept].tolist(),
        labels[placed][kept].tolist(),
        ids[placed][kept].tolist(),
    )


def reference_queries(
    scores: list[float], labels: list[float], ids: list[int], options: dict[str, Any]
) -> tuple[np.ndarray, list[int]]:
    """Per-query values ``[Q]`` / ``[Q, len(k)]`` in sorted id order, and the sorted ids."""
    ks, is_sequence = cutoffs(options.get("k"))
    empty = EMPTY_VALUES[options.get("empty_target_action", "neg")]
    keywords = reference_options(options)
    per_cut = [
        ref.ndcg_per_query(scores, labels, ids, cut, empty_value=empty, **keywords) for cut in ks
    ]
    query_ids = sorted(per_cut[0])
    values = np.array([[column[q] for column in per_cut] for q in query_ids], dtype=np.float64)
    return (values if is_sequence else values[:, 0]), query_ids


@pytest.mark.parametrize("case", LIST_CASE_VALUES, ids=LIST_CASE_IDS)
def test_retrieval_ndcg_option_against_loop_reference(case: dict[str, Any]) -> None:
    options, padding = split(case)
    data = lists_for(case)
    preds, target, indexes, scores, labels, ids = query_rows(data, padding, seed=1)
    ignore = {"ignore_index": -1} if padding in ("ignore_index", "both") else {}
    values, query_ids = retrieval_ndcg(preds, target, indexes, **ignore, **options)
    expected, expected_ids = reference_queries(scores, labels, ids, options)
    assert query_ids.tolist() == expected_ids
    close(values, expected)


@pytest.mark.parametrize("case", LIST_CASE_VALUES, ids=LIST_CASE_IDS)
def test_retrieval_metric_option_against_loop_reference(case: dict[str, Any]) -> None:
    """``aggregation="none"`` per query, and the default ``"mean"``, over two updates."""
    options, padding = split(case)
    data = lists_for(case)
    preds, target, indexes, scores, labels, ids = query_rows(data, padding, seed=2)
    ignore = {"ignore_index": -1} if padding in ("ignore_index", "both") else {}
    k = options.pop("k")
    expected, expected_ids = reference_queries(scores, labels, ids, {**options, "k": k})
    per_query = RetrievalNDCG(k, aggregation="none", **ignore, **options)
    mean = RetrievalNDCG(k, **ignore, **options)
    half = preds.numel() // 2
    for part in (slice(0, half), slice(half, None)):
        per_query.update(preds[part], target[part], indexes[part])
        mean.update(preds[part], target[part], indexes[part])
    values, query_ids = per_query.compute()
    assert query_ids.tolist() == expected_ids
    close(as_array(values, k), expected, atol=1e-6)
    close(
        as_array(mean.compute(), k),
        counted_mean(expected, np.ones(len(expected_ids), bool)),
        atol=1e-6,
    )


# --- empty_target_action="error": the message, and the values of "neg" when nothing is empty


def test_error_action_of_the_list_entry_points() -> None:
    data = make_lists(3)
    preds, target, keywords = list_inputs(data, "both")
    with pytest.raises(ValueError, match=re.escape(LIST_MESSAGE)):
        ndcg(preds, target, empty_target_action="error", **keywords)
    with pytest.raises(ValueError, match=re.escape(LIST_MESSAGE)):
        NDCG(3, empty_target_action="error", ignore_index=-1).update(
            preds, target, keywords["mask"]
        )
    # Without an empty target (a list of padding only is no list): the values of "neg".
    full = without_empty_targets(data)
    assert not full.real[0].any()  # the list of padding only is kept
    preds, target, keywords = list_inputs(full, "both")
    expected = reference_lists(full, {"k": [1, 4]})
    close(ndcg(preds, target, k=[1, 4], empty_target_action="error", **keywords), expected)
    metric = NDCG([1, 4], empty_target_action="error", ignore_index=-1)
    metric.update(preds, target, keywords["mask"])
    close(as_array(metric.compute(), [1, 4]), counted_mean(expected, full.real.any(1)), atol=1e-6)


def test_error_action_of_the_row_entry_points() -> None:
    data = make_lists(4)
    preds, target, indexes, *_ = query_rows(data, "both", seed=3)
    with pytest.raises(ValueError, match=re.escape(QUERY_MESSAGE)):
        retrieval_ndcg(preds, target, indexes, empty_target_action="error", ignore_index=-1)
    metric = RetrievalNDCG(empty_target_action="error", ignore_index=-1)
    metric.update(preds, target, indexes)  # raised in compute, not in update
    with pytest.raises(ValueError, match=re.escape(QUERY_MESSAGE)):
        metric.compute()
    full = without_empty_targets(data)
    preds, target, indexes, scores, labels, ids = query_rows(full, "both", seed=3)
    expected, expected_ids = reference_queries(scores, labels, ids, {"k": 3})
    values, query_ids = retrieval_ndcg(
        preds, target, indexes, k=3, empty_target_action="error", ignore_index=-1
    )
    assert query_ids.tolist() == expected_ids
    close(values, expected)
    metric = RetrievalNDCG(3, empty_target_action="error", ignore_index=-1)
    metric.update(preds, target, indexes)
    close(metric.compute(), expected.mean(), atol=1e-6)


def test_validate_args_false_skips_the_value_checks() -> None:
    """``validate_args=True`` raises on a negative label; ``False`` skips that check (and, on
    valid input, gives the reference values: every case ``validate_args=False`` above)."""
    preds, target = torch.tensor([[0.5, 0.1, 0.3]]), torch.tensor([[1, -2, 0]])
    rows = (preds.reshape(-1), target.reshape(-1), torch.zeros(3, dtype=torch.long))
    grade = torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.tensor([-1.0]), (1, 3))
    calls: dict[str, Callable[[bool], Any]] = {
        "ndcg": lambda check: ndcg(preds, target, validate_args=check),
        "dcg": lambda check: dcg(preds, target, validate_args=check),
        "NDCG": lambda check: NDCG(validate_args=check).update(preds, target),
        "retrieval_ndcg": lambda check: retrieval_ndcg(*rows, validate_args=check),
        "RetrievalNDCG": lambda check: RetrievalNDCG(validate_args=check).update(*rows),
    }
    for call in calls.values():
        with pytest.raises(ValueError, match=re.escape("Expected `target` to be non-negative")):
            call(True)
        call(False)
    queries, items = torch.eye(1, 2), torch.eye(3, 2)
    with pytest.raises(ValueError, match=re.escape("Expected non-negative relevance grades")):
        catalog_ndcg(queries, items, grade, k=2)
    catalog_ndcg(queries, items, grade, k=2, validate_args=False)


# --- Hypothesis: the options together


OPTION_VALUES = {
    "gain": st.sampled_from(["exponential", "linear", square_plus]),
    "discount": st.sampled_from(["log2", "jarvelin", reciprocal]),
    "ties": st.sampled_from(["average", "first"]),
    "empty_target_action": st.sampled_from(["neg", "pos", "skip"]),
    "validate_args": st.booleans(),
}


@st.composite
def list_options(draw: st.DrawFn, length: int) -> dict[str, Any]:
    options = {name: draw(values) for name, values in OPTION_VALUES.items()}
    options["k"] = draw(
        st.one_of(
            st.none(),
            st.integers(1, length + 2),
            st.lists(st.integers(1, length + 2), min_size=1, max_size=3, unique=True),
        )
    )
    options["padding"] = draw(st.sampled_from(["none", "mask", "ignore_index", "both"]))
    return options


@settings(max_examples=40, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16), length=st.integers(1, 8))
def test_list_entry_points_property(data: st.DataObject, seed: int, length: int) -> None:
    """`ndcg`, `dcg` and `NDCG` with any options together, against the loop references."""
    options, padding = split(data.draw(list_options(length)))
    lists = make_lists(seed, n_lists=6, length=length, padded=padding != "none")
    preds, target, keywords = list_inputs(lists, padding)
    expected = reference_lists(lists, options)
    close(ndcg(preds, target, **keywords, **options), expected)
    dcg_options = {name: v for name, v in options.items() if name != "empty_target_action"}
    close(
        dcg(preds, target, **keywords, **dcg_options),
        reference_lists(lists, dcg_options, normalize=False),
    )
    k = options.pop("k")
    metric = NDCG(k, ignore_index=keywords.get("ignore_index"), **options)
    metric.update(preds, target, keywords.get("mask"))
    close(as_array(metric.compute(), k), counted_mean(expected, lists.real.any(1)), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16), length=st.integers(1, 8))
def test_row_entry_points_property(data: st.DataObject, seed: int, length: int) -> None:
    """`retrieval_ndcg` and `RetrievalNDCG` with any options together, against the loops."""
    options, padding = split(data.draw(list_options(length)))
    lists = make_lists(seed, n_lists=6, length=length, padded=padding != "none")
    preds, target, indexes, scores, labels, ids = query_rows(lists, padding, seed=seed)
    ignore = {"ignore_index": -1} if padding in ("ignore_index", "both") else {}
    expected, expected_ids = reference_queries(scores, labels, ids, options)
    values, query_ids = retrieval_ndcg(preds, target, indexes, **ignore, **options)
    assert query_ids.tolist() == expected_ids
    close(values, expected)
    k = options.pop("k")
    metric = RetrievalNDCG(k, aggregation="none", **ignore, **options)
    metric.update(preds, target, indexes)
    values, query_ids = metric.compute()
    assert query_ids.reshape(-1).tolist() == expected_ids
    close(as_array(values, k).reshape(expected.shape), expected, atol=1e-6)


# --- Peers: scikit-learn (linear gain, log2, ties averaged) and torchmetrics


@pytest.mark.parametrize("k", [None, 1, 3, 12])
def test_ndcg_and_dcg_against_scikit_learn(k: int | None) -> None:
    data = make_lists(5, n_lists=16, length=6, padded=False)
    preds, target = torch.tensor(data.scores), torch.tensor(data.labels)
    ours = ndcg(preds, target, k=k, gain="linear").numpy()
    ours_dcg = dcg(preds, target, k=k, gain="linear").numpy()
    for row in range(preds.shape[0]):
        y_true, y_score = data.labels[row : row + 1], data.scores[row : row + 1]
        assert ours[row] == pytest.approx(ndcg_score(y_true, y_score, k=k), abs=1e-12)
        assert ours_dcg[row] == pytest.approx(
            dcg_score(y_true, y_score, k=k, log_base=2), abs=1e-12
        )


@pytest.mark.parametrize(
    "aggregation", ["mean", "median", "min", "max", mean_of_squares], ids=name_of
)
@pytest.mark.parametrize("empty_target_action", ["neg", "pos", "skip"])
@pytest.mark.parametrize("k", [None, 2])
def test_retrieval_metric_against_torchmetrics(
    aggregation: Any, empty_target_action: str, k: int | None
) -> None:
    """torchmetrics' RetrievalNormalizedDCG: linear gain, ties averaged, same aggregations."""
    data = make_lists(6, n_lists=15, length=5)
    data.scores = np.where(data.real, data.scores, 0.0)  # torchmetrics sorts every row
    preds, target, indexes, *_ = query_rows(data, "ignore_index", seed=4)
    indexes = indexes - indexes.min()  # torchmetrics counts ids with bincount
    options: Any = {"empty_target_action": empty_target_action, "ignore_index": -1}
    ours = RetrievalNDCG(k, aggregation=aggregation, gain="linear", **options)
    theirs = RetrievalNormalizedDCG(top_k=k, aggregation=aggregation, **options)
    for part in torch.arange(preds.numel()).split(23):
        ours.update(preds[part], target[part], indexes[part])
        theirs.update(preds[part], target[part], indexes=indexes[part])
    assert ours.compute().item() == pytest.approx(theirs.compute().item(), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# RetrievalNDCG's aggregations and intervals, written from their documented definitions


def spread_queries(seed: int, n_queries: int = 60) -> tuple[Tensor, Tensor, Tensor]:
    """Queries of 3..8 rows, continuous scores, grades 0..3, some without a relevant row."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 9, n_queries)
    ids = np.repeat(rng.permutation(n_queries) * 13 - 100, lengths)
    scores = rng.random(ids.size)
    labels = rng.integers(0, 4, ids.size) * (rng.random(ids.size) > 0.35)
    labels[ids == ids[0]] = 0  # a query with no relevant row
    return torch.tensor(scores), torch.tensor(labels), torch.tensor(ids)


def per_query_reference(
    preds: Tensor, target: Tensor, indexes: Tensor, k: int | None, empty: str
) -> np.ndarray:
    values = ref.ndcg_per_query(
        preds.tolist(), target.tolist(), indexes.tolist(), k, empty_value=EMPTY_VALUES[empty]
    )
    return np.array([values[q] for q in sorted(values)])


def statistic_of(aggregation: Any) -> Callable[[np.ndarray], float]:
    """The aggregation of ``[n]`` values, written with numpy and the loop references."""
    return {
        "mean": lambda v: float(np.mean(v)),
        "median": lambda v: ref.lower_median(list(v)),
        "min": lambda v: float(np.min(v)),
        "max": lambda v: float(np.max(v)),
        mean_of_squares: lambda v: float(np.mean(np.square(v))),
    }[aggregation]


AGGREGATIONS = ["mean", "median", "min", "max", mean_of_squares]


@pytest.mark.parametrize("aggregation", AGGREGATIONS, ids=name_of)
@pytest.mark.parametrize("empty_target_action", ["neg", "pos", "skip"])
def test_retrieval_aggregation_against_numpy(aggregation: Any, empty_target_action: str) -> None:
    preds, target, indexes = spread_queries(7)
    values = {
        k: per_query_reference(preds, target, indexes, k, empty_target_action) for k in (1, 4)
    }
    metric = RetrievalNDCG([1, 4], aggregation=aggregation, empty_target_action=empty_target_action)
    metric.update(preds, target, indexes)
    result = metric.compute()
    statistic = statistic_of(aggregation)
    for k, column in values.items():
        counted = column[~np.isnan(column)]
        assert result[f"ndcg@{k}"].item() == pytest.approx(statistic(counted), abs=1e-6)


def normal_bounds(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean ± z_{(1+c)/2} s / sqrt(n), with the sample standard deviation (scipy's quantile)."""
    n = values.size
    mean = float(np.mean(values))
    half = stats.norm.ppf((1 + confidence) / 2) * float(np.std(values, ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


@pytest.mark.parametrize("confidence", [0.5, 0.95])
@pytest.mark.parametrize("empty_target_action", ["neg", "skip"])
def test_normal_interval_of_both_metrics_against_scipy(
    confidence: float, empty_target_action: str
) -> None:
    preds, target, indexes = spread_queries(8)
    options: Any = {"empty_target_action": empty_target_action}
    rows = RetrievalNDCG([2, 5], confidence=confidence, **options)
    rows.update(preds, target, indexes)
    by_rows = rows.compute()
    # The same queries as padded lists for NDCG (padding by mask: not counted).
    order = torch.argsort(indexes, stable=True)
    ids, counts = torch.unique_consecutive(indexes[order], return_counts=True)
    width = int(counts.max())
    lists_preds = torch.zeros(ids.numel(), width, dtype=torch.float64)
    lists_target = torch.zeros(ids.numel(), width, dtype=torch.long)
    mask = torch.arange(width)[None, :] < counts[:, None]
    lists_preds[mask], lists_target[mask] = preds[order], target[order]
    lists = NDCG([2, 5], confidence=confidence, **options)
    lists.update(lists_preds, lists_target, mask)
    by_lists = lists.compute()
    for k in (2, 5):
        column = per_query_reference(preds, target, indexes, k, empty_target_action)
        expected = normal_bounds(column[~np.isnan(column)], confidence)
        for result in (by_rows, by_lists):
            got = [result[f"ndcg@{k}{end}"].item() for end in ("", "_low", "_high")]
            close(got, expected, atol=1e-6)


@pytest.mark.parametrize("metric_class", [NDCG, RetrievalNDCG])
def test_normal_interval_is_nan_below_two_lists(metric_class: Any) -> None:
    metric = metric_class(confidence=0.9)
    preds, target = torch.tensor([0.3, 0.9, 0.1]), torch.tensor([1, 0, 2])
    if metric_class is NDCG:
        metric.update(preds, target)
    else:
        metric.update(preds, target, torch.zeros(3, dtype=torch.long))
    result = metric.compute()
    expected = ref.ndcg_one_list(preds.tolist(), target.tolist(), None)
    assert result["ndcg"].item() == pytest.approx(expected, abs=1e-6)
    assert math.isnan(result["ndcg_low"].item())
    assert math.isnan(result["ndcg_high"].item())


def bootstrap_queries(seed: int = 9) -> tuple[Tensor, Tensor, Tensor]:
    """33 queries of 10..20 rows, 31 with a relevant row: 31 distinct per-query values."""
    rng = np.random.default_rng(seed)
    n_queries = 33
    lengths = rng.integers(10, 21, n_queries)
    ids = np.repeat(rng.permutation(n_queries) * 13 - 100, lengths)
    scores = rng.random(ids.size)
    labels = rng.integers(1, 4, ids.size) * (rng.random(ids.size) > 0.7)
    labels[np.isin(ids, ids[[0, -1]])] = 0  # two queries with no relevant row
    return torch.tensor(scores), torch.tensor(labels), torch.tensor(ids)


ORDER_STATISTICS = {"min": lambda n: 1, "median": lambda n: (n - 1) // 2 + 1, "max": lambda n: n}
BOOTSTRAP_LEVELS = (0.5, 0.85)
BOOTSTRAP_RESAMPLES = 4000


def exact_order_statistic_interval(
    values: np.ndarray, aggregation: str, confidence: float, resamples: int
) -> tuple[np.ndarray, float]:
    """The limit of the percentile bootstrap of an order statistic, from the binomial law.

    The ``j``-th smallest of ``n`` values drawn with replacement is at most ``v`` when at
    least ``j`` draws are at most ``v``: ``P = 1 - BinomCDF(j - 1; n, F(v))``, ``F`` the
    share of the values at most ``v``. The ``q`` quantile of that discrete law is the least
    ``v`` whose ``P`` reaches ``q``; the quantile of ``resamples`` draws is that value too
    when ``q`` lies far from every step of ``P``. Returns the bounds and the least distance
    of a level from a step, in standard errors of an empirical quantile level.
    """
    n = values.size
    j = ORDER_STATISTICS[aggregation](n)
    support = np.unique(values)
    shares = np.array([(values <= v).sum() / n for v in support])
    law = 1.0 - stats.binom.cdf(j - 1, n, shares)
    bounds, margin = [], math.inf
    for level in ((1 - confidence) / 2, (1 + confidence) / 2):
        bounds.append(support[np.searchsorted(law, level)])
        margin = min(
            margin, np.min(np.abs(law - level)) / math.sqrt(level * (1 - level) / resamples)
        )
    return np.array(bounds), margin


def bootstrap_result(aggregation: Any, confidence: float, **options: Any) -> np.ndarray:
    preds, target, indexes = bootstrap_queries()
    metric = RetrievalNDCG(
        aggregation=aggregation, confidence=confidence, empty_target_action="skip", **options
    )
    metric.update(preds, target, indexes)
    result = metric.compute()
    return np.array([result[name].item() for name in ("ndcg", "ndcg_low", "ndcg_high")])


def bootstrap_values() -> np.ndarray:
    column = per_query_reference(*bootstrap_queries(), None, "skip")
    return column[~np.isnan(column)]


@pytest.mark.parametrize("aggregation", list(ORDER_STATISTICS))
@pytest.mark.parametrize("confidence", BOOTSTRAP_LEVELS)
def test_bootstrap_interval_of_order_statistics_is_exact(
    aggregation: str, confidence: float
) -> None:
    values = bootstrap_values()
    assert values.size == 31
    assert np.unique(values).size == values.size
    expected, margin = exact_order_statistic_interval(
        values, aggregation, confidence, BOOTSTRAP_RESAMPLES
    )
    assert margin > 4  # the bounds of 4,000 resamples are the limit's, not a neighbour
    got = bootstrap_result(
        aggregation, confidence, bootstrap_resamples=BOOTSTRAP_RESAMPLES, bootstrap_seed=11
    )
    assert got[0] == pytest.approx(statistic_of(aggregation)(values), abs=1e-6)
    close(got[1:], expected, atol=1e-6)
    # The test tells intervals apart: those of the other statistics and of the other level.
    wrong = [
        exact_order_statistic_interval(values, other, confidence, BOOTSTRAP_RESAMPLES)[0]
        for other in ORDER_STATISTICS
        if other != aggregation
    ]
    wrong += [
        exact_order_statistic_interval(values, aggregation, level, BOOTSTRAP_RESAMPLES)[0]
        for level in BOOTSTRAP_LEVELS
        if level != confidence
    ]
    wrong.append(np.array(normal_bounds(values, confidence)[1:]))
    for interval in wrong:
        assert np.abs(interval - expected).max() > 1e-3


# 4,000 resamples (the package's) against scipy's 40,000: a Monte Carlo error of about 1e-3;
# the intervals of another statistic or level are at least 2x this tolerance away.
CALLABLE_TOLERANCE = 0.004


@pytest.mark.parametrize("confidence", BOOTSTRAP_LEVELS)
def test_bootstrap_interval_of_a_callable_against_scipy(confidence: float) -> None:
    values = bootstrap_values()

    def scipy_interval(statistic: Callable[..., Any], level: float) -> np.ndarray:
        result = stats.bootstrap(
            (values,),
            statistic,
            n_resamples=40_000,
            confidence_level=level,
            method="percentile",
            rng=np.random.default_rng(0),
        )
        return np.array([result.confidence_interval.low, result.confidence_interval.high])

    def squares(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(np.square(x), axis=axis)

    expected = scipy_interval(squares, confidence)
    got = bootstrap_result(
        mean_of_squares, confidence, bootstrap_resamples=BOOTSTRAP_RESAMPLES, bootstrap_seed=11
    )
    assert got[0] == pytest.approx(float(np.mean(np.square(values))), abs=1e-6)
    close(got[1:], expected, atol=CALLABLE_TOLERANCE)
    other = BOOTSTRAP_LEVELS[1 - BOOTSTRAP_LEVELS.index(confidence)]
    wrong = [scipy_interval(squares, other), scipy_interval(np.mean, confidence)]
    for interval in wrong:
        assert np.abs(interval - expected).max() > 2 * CALLABLE_TOLERANCE


@pytest.mark.parametrize("aggregation", [*ORDER_STATISTICS, mean_of_squares], ids=name_of)
def test_bootstrap_resamples_and_seed(aggregation: Any) -> None:
    """One resample gives one statistic: low = high, that of a resample of the values.

    Other seeds draw other resamples: over four seeds the bounds of 5 resamples move. The
    defaults are 1,000 resamples and the seed 0.
    """
    values = bootstrap_values()
    low, high = bootstrap_result(aggregation, 0.9, bootstrap_resamples=1, bootstrap_seed=3)[1:]
    assert low == high
    if aggregation in ORDER_STATISTICS:  # an order statistic of a resample: one of the values
        assert np.min(np.abs(values - low)) < 1e-6
    if aggregation == "min":
        assert low >= values.min() - 1e-6
    if aggregation == "max":
        assert low <= values.max() + 1e-6
    draws = {
        tuple(bootstrap_result(aggregation, 0.9, bootstrap_resamples=5, bootstrap_seed=seed))
        for seed in range(4)
    }
    assert len(draws) > 1
    defaults = bootstrap_result(aggregation, 0.9)
    explicit = bootstrap_result(aggregation, 0.9, bootstrap_resamples=1000, bootstrap_seed=0)
    np.testing.assert_array_equal(defaults, explicit)


# ---------------------------------------------------------------------------------------------
# catalog_ndcg, NDCG.update_catalog, and dense scores against sparse targets / `exclude`


@dataclass
class Catalog:
    queries: np.ndarray  # [B, d] small integers: many equal scores
    items: np.ndarray  # [N, d]
    grades: list[dict[int, float]]  # per user: relevant item id -> grade
    excluded: list[set[int]]  # per user: excluded item ids, never relevant


def make_catalog(seed: int, users: int = 6, n_items: int = 37, dim: int = 3) -> Catalog:
    """Relevant and excluded items drawn among each user's best-scored items (dot product).

    Seen items are often among the best scored, and the relevant ones should reach the top
    ``k``: both change the values. The catalog's last item (in a ragged last chunk) is
    relevant to every user but user 0, who has no relevant item; user 2 excludes nothing.
    """
    rng = np.random.default_rng(seed)
    queries = rng.integers(-2, 3, (users, dim)).astype(np.float64)
    items = rng.integers(-2, 3, (n_items, dim)).astype(np.float64)
    grades, excluded = [], []
    for user in range(users):
        best = np.argsort(-(items @ queries[user]), kind="stable")
        best = best[best != n_items - 1][:7]
        picks = rng.permutation(best)
        n_relevant = 0 if user == 0 else int(rng.integers(1, 4))
        n_excluded = 0 if user == 2 else int(rng.integers(1, 4))
        grades.append({int(i): float(rng.integers(1, 4)) for i in picks[:n_relevant]})
        if user != 0:
            grades[-1][n_items - 1] = float(rng.integers(1, 4))
        excluded.append({int(i) for i in picks[n_relevant : n_relevant + n_excluded]})
    return Catalog(queries, items, grades, excluded)


def relevant_input(data: Catalog, form: str) -> tuple[Tensor, list[dict[int, float]]]:
    """``relevant`` in a documented form, and the grades it stands for (ids: grade 1)."""
    users, n_items = data.queries.shape[0], data.items.shape[0]
    if form == "ids":
        width = max(1, max(len(g) for g in data.grades))
        ids = torch.full((users, width + 1), -1)  # a column of padding at least
        for user, grades in enumerate(data.grades):
            ids[user, : len(grades)] = torch.tensor(sorted(grades), dtype=torch.long)
        return ids, [dict.fromkeys(grades, 1.0) for grades in data.grades]
    rows = [user for user, grades in enumerate(data.grades) for _ in grades]
    cols = [item for grades in data.grades for item in grades]
    values = [grade for grades in data.grades for grade in grades.values()]
    coo = torch.sparse_coo_tensor(
        torch.tensor([rows, cols], dtype=torch.long),
        torch.tensor(values, dtype=torch.float64),
        (users, n_items),
    )
    return (coo if form == "sparse_coo" else coo.to_sparse_csr()), data.grades


def exclude_input(data: Catalog, form: str) -> Tensor | None:
    """``exclude`` in a documented form (ids: negative pads)."""
    users, n_items = data.queries.shape[0], data.items.shape[0]
    if form == "none":
        return None
    if form == "ids":
        width = max(len(e) for e in data.excluded) + 1
        ids = torch.full((users, width), -1)
        for user, items in enumerate(data.excluded):
            ids[user, : len(items)] = torch.tensor(sorted(items), dtype=torch.long)
        return ids
    dense = torch.zeros(users, n_items, dtype=torch.bool)
    for user, items in enumerate(data.excluded):
        dense[user, sorted(items)] = True
    if form == "bool":
        return dense
    coo = dense.to(torch.float64).to_sparse()
    return coo if form == "sparse_coo" else coo.to_sparse_csr()


def negative_l1(queries: Tensor, items: Tensor) -> Tensor:
    """A `score_fn` other than the dot product: minus the L1 distance."""
    return -(queries[:, None, :] - items[None, :, :]).abs().sum(-1)


def loop_scores(data: Catalog, score_fn: str) -> list[list[float]]:
    """Every user's score of every item, pair by pair."""
    out = []
    for q in data.queries.tolist():
        row = []
        for x in data.items.tolist():
            if score_fn == "dot":
                row.append(sum(a * b for a, b in zip(q, x, strict=True)))
            else:
                row.append(-sum(abs(a - b) for a, b in zip(q, x, strict=True)))
        out.append(row)
    return out


def reference_catalog(
    data: Catalog,
    grades: list[dict[int, float]],
    options: dict[str, Any],
    *,
    excluded: bool,
    score_fn: str = "dot",
) -> np.ndarray:
    ks, is_sequence = cutoffs(options.get("k"))
    empty = EMPTY_VALUES[options.get("empty_target_action", "neg")]
    keywords = reference_options(options)
    item_ids = list(range(data.items.shape[0]))
    values = []
    for user, scores in enumerate(loop_scores(data, score_fn)):
        seen = data.excluded[user] if excluded else set()
        values.append(
            [
                ref.catalog_ndcg_one_user(
                    scores, item_ids, grades[user], seen, cut, empty_value=empty, **keywords
                )
                for cut in ks
            ]
        )
    array = np.array(values, dtype=np.float64)
    return array if is_sequence else array[:, 0]


CATALOG_BASE: dict[str, Any] = {"k": [1, 5], "exclude": "ids", "relevant": "sparse_coo"}
CATALOG_CASES: list[tuple[str, dict[str, Any]]] = [
    ("k=None", {"k": None}),
    ("k=3", {"k": 3}),
    ("k=[10,1,4]", {"k": [10, 1, 4]}),
    ("k=60 (> N)", {"k": 60}),
    ("gain=exponential", {"gain": "exponential"}),
    ("gain=linear", {"gain": "linear"}),
    ("gain=callable", {"gain": square_plus}),
    ("discount=log2", {"discount": "log2"}),
    ("discount=jarvelin", {"discount": "jarvelin"}),
    ("discount=callable", {"discount": reciprocal}),
    ("ties=average", {"ties": "average"}),
    ("ties=first", {"ties": "first"}),
    ("empty=neg", {"empty_target_action": "neg"}),
    ("empty=pos", {"empty_target_action": "pos"}),
    ("empty=skip", {"empty_target_action": "skip"}),
    ("exclude=None", {"exclude": "none"}),
    ("exclude=bool", {"exclude": "bool"}),
    ("exclude=ids", {"exclude": "ids"}),
    ("exclude=sparse_coo", {"exclude": "sparse_coo"}),
    ("exclude=sparse_csr", {"exclude": "sparse_csr"}),
    ("relevant=ids", {"relevant": "ids"}),
    ("relevant=sparse_csr", {"relevant": "sparse_csr"}),
    ("score_fn=callable", {"score_fn": "l1"}),
    ("chunk_size=1", {"chunk_size": 1, "k": None}),
    ("chunk_size=5", {"chunk_size": 5, "k": None}),
    ("chunk_size=32", {"chunk_size": 32, "k": None}),
    ("memory_budget=8", {"memory_budget": 8, "k": None}),
    ("memory_budget=300", {"memory_budget": 300, "k": None}),
    ("chunk_size=4,memory_budget=64", {"chunk_size": 4, "memory_budget": 64, "k": None}),
    ("validate_args=False", {"validate_args": False}),
]
CATALOG_CASE_IDS = [name for name, _ in CATALOG_CASES]
CATALOG_CASE_VALUES = [{**CATALOG_BASE, **case} for _, case in CATALOG_CASES]


def catalog_call(
    data: Catalog, case: dict[str, Any]
) -> tuple[Tensor, Tensor, Tensor, dict[str, Any], np.ndarray]:
    """The arguments of `catalog_ndcg` for a case, and the reference values."""
    options = dict(case)
    relevant, grades = relevant_input(data, options.pop("relevant"))
    exclude_form = options.pop("exclude")
    score_fn = options.pop("score_fn", "dot")
    if score_fn == "l1":
        options["score_fn"] = negative_l1
    if exclude_form != "none":
        options["exclude"] = exclude_input(data, exclude_form)
    expected = reference_catalog(
        data,
        grades,
        case,
        excluded=exclude_form != "none",
        score_fn=score_fn,
    )
    return torch.tensor(data.queries), torch.tensor(data.items), relevant, options, expected


@pytest.mark.parametrize("case", CATALOG_CASE_VALUES, ids=CATALOG_CASE_IDS)
def test_catalog_ndcg_option_against_loop_reference(case: dict[str, Any]) -> None:
    data = make_catalog(12)
    queries, items, relevant, options, expected = catalog_call(data, case)
    close(catalog_ndcg(queries, items, relevant, **options), expected)


@pytest.mark.parametrize(
    "case",
    [CATALOG_CASE_VALUES[i] for i in (0, 6, 9, 11, 14, 16, 22, 28)],
    ids=[CATALOG_CASE_IDS[i] for i in (0, 6, 9, 11, 14, 16, 22, 28)],
)
def test_update_catalog_option_against_loop_reference(case: dict[str, Any]) -> None:
    data = make_catalog(13)
    queries, items, relevant, options, expected = catalog_call(data, case)
    k = options.pop("k")
    streaming = {
        name: options.pop(name)
        for name in ("exclude", "score_fn", "chunk_size", "memory_budget")
        if name in options
    }
    metric = NDCG(k, **options)
    metric.update_catalog(
        queries[:3], items, relevant_rows(relevant, 0, 3), **rows_of(streaming, 0, 3)
    )
    metric.update_catalog(
        queries[3:], items, relevant_rows(relevant, 3, 6), **rows_of(streaming, 3, 6)
    )
    close(as_array(metric.compute(), k), counted_mean(expected, np.ones(6, bool)), atol=1e-6)


def relevant_rows(relevant: Tensor, start: int, stop: int) -> Tensor:
    if relevant.layout == torch.strided:
        return relevant[start:stop]
    coo = relevant.to_sparse_coo() if relevant.layout != torch.sparse_coo else relevant
    return coo.index_select(0, torch.arange(start, stop))


def rows_of(streaming: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    out = dict(streaming)
    if out.get("exclude") is not None:
        out["exclude"] = relevant_rows(out["exclude"], start, stop)
    return out


def test_catalog_error_action() -> None:
    data = make_catalog(14)
    queries, items, relevant, options, _ = catalog_call(data, CATALOG_BASE)
    with pytest.raises(ValueError, match=re.escape(USER_MESSAGE)):
        catalog_ndcg(queries, items, relevant, empty_target_action="error", **options)
    # Without user 0 (no relevant item): the values of "neg".
    data = Catalog(data.queries[1:], data.items, data.grades[1:], data.excluded[1:])
    queries, items, relevant, options, expected = catalog_call(data, CATALOG_BASE)
    got = catalog_ndcg(queries, items, relevant, empty_target_action="error", **options)
    close(got, expected)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    options=st.fixed_dictionaries(
        {
            "k": st.one_of(
                st.none(),
                st.integers(1, 45),
                st.lists(st.integers(1, 45), min_size=1, max_size=3, unique=True),
            ),
            **OPTION_VALUES,
            "exclude": st.sampled_from(["none", "bool", "ids", "sparse_coo", "sparse_csr"]),
            "relevant": st.sampled_from(["ids", "sparse_coo", "sparse_csr"]),
            "score_fn": st.sampled_from(["dot", "l1"]),
            "chunk_size": st.sampled_from([None, 1, 6, 32]),
            "memory_budget": st.sampled_from([None, 16, 400]),
        }
    ),
)
def test_catalog_ndcg_property(seed: int, options: dict[str, Any]) -> None:
    data = make_catalog(seed, users=4, n_items=int(np.random.default_rng(seed).integers(1, 40)))
    queries, items, relevant, arguments, expected = catalog_call(data, options)
    close(catalog_ndcg(queries, items, relevant, **arguments), expected)


# --- Dense [B, N] scores with a sparse target and `exclude` (ndcg, dcg, NDCG.update)


def dense_case(data: Catalog) -> tuple[Tensor, torch.Tensor]:
    scores = torch.tensor(loop_scores(data, "dot"), dtype=torch.float64)
    target = torch.zeros(scores.shape, dtype=torch.float64)
    for user, grades in enumerate(data.grades):
        for item, grade in grades.items():
            target[user, item] = grade
    return scores, target


@pytest.mark.parametrize("target_form", ["dense", "sparse_coo", "sparse_csr"])
@pytest.mark.parametrize("exclude_form", ["none", "bool", "ids", "sparse_coo"])
@pytest.mark.parametrize(
    "options",
    [{"k": [1, 6]}, {"k": 4, "ties": "first", "gain": "linear"}, {"discount": "jarvelin"}],
    ids=["k=[1,6]", "first,linear", "jarvelin"],
)
def test_sparse_target_and_exclude_against_loop_reference(
    target_form: str, exclude_form: str, options: dict[str, Any]
) -> None:
    """`ndcg`, `dcg` and `NDCG.update` of dense scores: a sparse or dense target, `exclude`."""
    data = make_catalog(15, users=5, n_items=23)
    scores, dense_target = dense_case(data)
    target = {
        "dense": dense_target,
        "sparse_coo": dense_target.to_sparse(),
        "sparse_csr": dense_target.to_sparse_csr(),
    }[target_form]
    exclude = exclude_input(data, exclude_form)
    real = np.ones(scores.shape, bool)
    if exclude is not None:
        for user, items in enumerate(data.excluded):
            real[user, sorted(items)] = False
    lists = Lists(scores.numpy(), dense_target.numpy(), real)
    keywords: dict[str, Any] = {} if exclude is None else {"exclude": exclude}
    expected = reference_lists(lists, options)
    close(ndcg(scores, target, **keywords, **options), expected)
    close(
        dcg(scores, target, **keywords, **options), reference_lists(lists, options, normalize=False)
    )
    k = options.get("k")
    metric = NDCG(k, **{name: v for name, v in options.items() if name != "k"})
    metric.update(scores, target, None, exclude)
    close(as_array(metric.compute(), k), expected.mean(0), atol=1e-6)


def test_sparse_target_mask_and_ignore_index() -> None:
    """A mask with a sparse target marks padding (not ranked); ``ignore_index`` is refused."""
    data = make_catalog(16, users=5, n_items=23)
    scores, dense_target = dense_case(data)
    mask = torch.ones(scores.shape, dtype=torch.bool)
    mask[:, ::5] = False
    mask |= dense_target != 0  # padding only where nothing is relevant (see the test below)
    lists = Lists(scores.numpy(), dense_target.numpy(), mask.numpy())
    close(
        ndcg(scores, dense_target.to_sparse(), k=[2, 7], mask=mask),
        reference_lists(lists, {"k": [2, 7]}),
    )
    message = "Expected no `ignore_index` with a sparse target"
    with pytest.raises(ValueError, match=re.escape(message)):
        ndcg(scores, dense_target.to_sparse(), ignore_index=-1)


@pytest.mark.parametrize("validate_args", [True, False])
def test_sparse_target_mask_on_a_relevant_item_is_padding(validate_args: bool) -> None:
    preds = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    target = torch.tensor([[1.0, 0.0, 2.0, 0.0]])
    mask = torch.tensor([[True, True, False, True]])
    lists = Lists(preds.numpy(), target.numpy(), mask.numpy())
    options = {"validate_args": validate_args}
    close(
        dcg(preds, target.to_sparse(), mask=mask, **options),
        reference_lists(lists, {}, normalize=False),
    )
    close(ndcg(preds, target.to_sparse(), mask=mask, **options), reference_lists(lists, {}))


# ---------------------------------------------------------------------------------------------
# The options of a metric once it is made: read as given, never set (its states follow them)

FIXED_OPTIONS = {
    "k": [1, 3],
    "gain": "linear",
    "discount": "jarvelin",
    "ties": "first",
    "empty_target_action": "pos",
    "ignore_index": -1,
    "validate_args": False,
    "confidence": 0.9,
}


@pytest.mark.parametrize("metric_class", [NDCG, RetrievalNDCG])
@pytest.mark.parametrize("name", list(FIXED_OPTIONS))
def test_a_metrics_option_reads_as_given_and_setting_it_raises_naming_it(
    metric_class: type, name: str
) -> None:
    given = FIXED_OPTIONS[name]
    metric = metric_class(**{name: given})
    assert getattr(metric, name) == (tuple(given) if isinstance(given, list) else given)
    assert metric_class().k is None
    assert metric_class(k=4).k == 4
    preds = torch.tensor([[0.3, 0.1, 0.2], [0.5, 0.9, 0.1]])
    target = torch.tensor([[2, 0, 1], [1, 0, 3]])
    if metric_class is RetrievalNDCG:
        indexes = torch.tensor([0, 0, 0, 1, 1, 1])
        update = lambda m: m.update(preds.reshape(-1), target.reshape(-1), indexes)  # noqa: E731
    else:
        update = lambda m: m.update(preds, target)  # noqa: E731
    update(metric)
    # Silently ignored (a new attribute) or taken by half the states, a set option would give
    # another number: it raises, naming the option, and the metric keeps its own.
    other = {"k": 2, "confidence": None, "validate_args": True}.get(name, "neg")
    fixed = re.escape(f"`{metric_class.__name__}.{name}` is fixed")
    with pytest.raises(AttributeError, match=fixed):
        setattr(metric, name, other)
    assert getattr(metric, name) == getattr(metric_class(**{name: given}), name)
    update(metric)
    fresh = metric_class(**{name: given})
    update(fresh)
    update(fresh)
    torch.testing.assert_close(metric.compute(), fresh.compute())
