"""``gain=`` as a table of per-label gains (LightGBM's and XGBoost's ``label_gain``).

Label i gains ``gain[i]``: equal to LightGBM's own eval with a custom ``label_gain``, to the
named gains where a table is one, to a float64 loop for a table that is not monotone, and the
errors name ``target`` and ``gain``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from tests import references as ref
from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    PLRankLoss,
    RetrievalNDCG,
    SoftmaxLoss,
    UnbiasedLambdaRankLoss,
    XENDCGLoss,
    approx_ndcg_loss,
    catalog_ndcg,
    dcg,
    lambdarank_loss,
    ndcg,
    neural_ndcg_loss,
    pad_by_query,
    pl_rank_loss,
    retrieval_ndcg,
    softmax_loss,
    xe_ndcg_loss,
)

EXPONENTIAL = [2.0**i - 1 for i in range(6)]
LINEAR = [float(i) for i in range(6)]
NON_MONOTONE = [0.0, 5.0, 1.0, 7.0, 2.0, 3.0]


def _lists() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    preds = torch.randn(4, 7, generator=generator, dtype=torch.float64)
    preds[0, 2] = preds[0, 5]  # a tie
    target = torch.randint(0, 6, (4, 7), generator=generator)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 5:] = False
    return preds, target, mask


def _metric(metric: Any, preds: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> Any:
    metric.update(preds, target, mask=mask)
    return metric.compute()


def _retrieval(gain: Any, k: int) -> Any:
    preds, target, mask = _lists()
    indexes = torch.arange(4)[:, None].expand(4, 7)
    return retrieval_ndcg(preds[mask], target[mask], indexes[mask], k=k, gain=gain)[0]


def _retrieval_metric(gain: Any, k: int) -> Any:
    preds, target, mask = _lists()
    indexes = torch.arange(4)[:, None].expand(4, 7)
    metric = RetrievalNDCG(k=k, gain=gain).double()
    metric.update(preds[mask], target[mask], indexes[mask])
    return metric.compute()


def _catalog(gain: Any, k: int) -> Any:
    generator = torch.Generator().manual_seed(5)
    queries = torch.randn(3, 4, generator=generator, dtype=torch.float64)
    items = torch.randn(9, 4, generator=generator, dtype=torch.float64)
    grades = torch.zeros(3, 9)
    grades[0, [0, 2, 5]] = torch.tensor([5.0, 1.0, 3.0])
    grades[1, [1, 4]] = torch.tensor([2.0, 4.0])
    grades[2, [3, 6, 8]] = torch.tensor([1.0, 5.0, 3.0])
    relevant = grades.to_sparse()
    return catalog_ndcg(queries, items, relevant, k=k, gain=gain)


def _with_grad(loss: Callable[..., torch.Tensor], **options: Any) -> Callable[[Any], Any]:
    def run(gain: Any) -> Any:
        preds, target, mask = _lists()
        preds.requires_grad_(True)
        value = loss(preds, target, mask=mask, gain=gain, **options)
        value.backward()
        return value.detach(), preds.grad

    return run


def _unbiased(gain: Any) -> Any:
    preds, target, mask = _lists()
    preds.requires_grad_(True)
    clicks, positions = (target > 2).double(), torch.arange(7).expand(4, 7)
    loss_fn = UnbiasedLambdaRankLoss(num_positions=7, gain=gain, momentum=0.0).double()
    value = loss_fn(preds, clicks, positions, mask=mask)
    value.backward()
    return value.detach(), preds.grad


def _seeded(loss: Callable[..., torch.Tensor], **options: Any) -> Callable[[Any], Any]:
    def run(gain: Any) -> Any:
        generator = torch.Generator().manual_seed(0)
        return _with_grad(loss, generator=generator, **options)(gain)

    return run


def _module(make: Callable[..., torch.nn.Module], **options: Any) -> Callable[[Any], Any]:
    def loss(preds: torch.Tensor, target: torch.Tensor, **given: Any) -> torch.Tensor:
        mask, gain = given.pop("mask"), given.pop("gain")
        return make(gain=gain, **options, **given).double()(preds, target, mask=mask)

    return _with_grad(loss)


ENTRY_POINTS: dict[str, Callable[[Any], Any]] = {
    "ndcg": lambda gain: ndcg(*_lists()[:2], mask=_lists()[2], k=[1, 3, 7], gain=gain),
    "dcg": lambda gain: dcg(*_lists()[:2], mask=_lists()[2], k=[1, 3, 7], gain=gain),
    "ndcg_first": lambda gain: ndcg(*_lists()[:2], k=3, gain=gain, ties="first"),
    "retrieval_ndcg": lambda gain: _retrieval(gain, 3),
    "catalog_ndcg": lambda gain: _catalog(gain, 4),
    "NDCG": lambda gain: _metric(NDCG(k=[1, 3], gain=gain).double(), *_lists()),
    "RetrievalNDCG": lambda gain: _retrieval_metric(gain, 3),
    "lambdarank_loss": _with_grad(lambdarank_loss, k=3),
    "approx_ndcg_loss": _with_grad(approx_ndcg_loss),
    "neural_ndcg_loss": _with_grad(neural_ndcg_loss),
    "softmax_loss": _with_grad(softmax_loss),
    "xe_ndcg_loss": _seeded(xe_ndcg_loss),
    "pl_rank_loss": _seeded(pl_rank_loss, num_samples=8),
    "LambdaRankLoss": _module(LambdaRankLoss),
    "ApproxNDCGLoss": _module(ApproxNDCGLoss),
    "NeuralNDCGLoss": _module(NeuralNDCGLoss),
    "SoftmaxLoss": _module(SoftmaxLoss),
    "XENDCGLoss": _module(XENDCGLoss),
    "PLRankLoss": lambda gain: _module(PLRankLoss, num_samples=8)(gain),
    "UnbiasedLambdaRankLoss": _unbiased,
}


def _close(got: Any, want: Any) -> None:
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
@pytest.mark.parametrize(("table", "named"), [(EXPONENTIAL, "exponential"), (LINEAR, "linear")])
def test_a_table_equals_the_named_gain_it_spells_out(
    name: str, table: list[float], named: str
) -> None:
    run = ENTRY_POINTS[name]
    if name in ("PLRankLoss", "XENDCGLoss"):  # the modules' draws: seeded the same for both
        torch.manual_seed(0)
        want = run(named)
        torch.manual_seed(0)
        _close(run(table), want)
        return
    _close(run(table), run(named))


@pytest.mark.parametrize("kind", [list, tuple, torch.tensor, np.array], ids=str)
def test_a_table_is_taken_as_a_list_tuple_tensor_or_array(kind: Any) -> None:
    preds, target, mask = _lists()
    want = ndcg(preds, target, mask=mask, gain=NON_MONOTONE)
    _close(ndcg(preds, target, mask=mask, gain=kind(NON_MONOTONE)), want)


@pytest.mark.parametrize("ties", ["average", "first"])
@pytest.mark.parametrize("k", [None, 1, 3])
def test_a_table_that_is_not_monotone_equals_the_loop(ties: str, k: int | None) -> None:
    preds, target, mask = _lists()

    def table_gain(y: float) -> float:
        return NON_MONOTONE[int(y)]

    want = ref.ndcg_padded_batch(
        preds.tolist(), target.tolist(), mask.tolist(), k, gain=table_gain, ties=ties
    )
    got = ndcg(preds, target, mask=mask, k=k, gain=NON_MONOTONE, ties=ties)
    _close(got, torch.tensor(want, dtype=torch.float64))
    # The ideal order is that of the gains, not of the labels: a list gaining most from label 1.
    one = ndcg(
        torch.tensor([[2.0, 1.0]], dtype=torch.float64), torch.tensor([[2, 1]]), gain=NON_MONOTONE
    )
    _close(one, torch.tensor([(1 + 5 / np.log2(3)) / (5 + 1 / np.log2(3))]))


def test_a_long_batch_with_a_table_equals_the_loop() -> None:
    # Past the small sizes the ideal DCG may come from label counts: only for a monotone table.
    generator = torch.Generator().manual_seed(1)
    preds = torch.randn(300, 20, generator=generator, dtype=torch.float64)
    target = torch.randint(0, 6, (300, 20), generator=generator)
    real = [[True] * 20] * 300
    for table in (NON_MONOTONE, [0.0, 1.0, 1.0, 4.0, 9.0, 9.5]):

        def table_gain(y: float, table: list[float] = table) -> float:
            return table[int(y)]

        want = ref.ndcg_padded_batch(preds.tolist(), target.tolist(), real, 5, gain=table_gain)
        got = ndcg(preds, target, k=5, gain=table)
        _close(got, torch.tensor(want, dtype=torch.float64))


@pytest.mark.filterwarnings("ignore:The argument .eval_set. is deprecated")
def test_equal_to_lightgbm_with_its_own_label_gain() -> None:
    lightgbm = pytest.importorskip("lightgbm")
    from ranking_data import load_split

    train, test = load_split("train"), load_split("test")
    label_gain = [0.0, 1.0, 3.0, 7.0, 40.0]  # grades 0-4, not LightGBM's default 2^i - 1
    cutoffs = [1, 3, 5, 10]
    ranker = lightgbm.LGBMRanker(n_estimators=5, verbose=-1, label_gain=label_gain)
    ranker.fit(
        train.features,
        train.labels,
        group=train.query_sizes,
        eval_set=[(test.features, test.labels)],
        eval_group=[test.query_sizes],
        eval_at=cutoffs,
    )
    reported = [ranker.evals_result_["valid_0"][f"ndcg@{k}"][-1] for k in cutoffs]
    scores = torch.from_numpy(ranker.predict(test.features)).double()
    (preds, target), mask, _, _ = pad_by_query(
        torch.from_numpy(test.query_ids()), scores, torch.from_numpy(test.labels)
    )
    # LightGBM's eval: stable tie order, lists with no relevant item score 1.
    ours = ndcg(
        preds,
        target,
        k=cutoffs,
        mask=mask,
        gain=label_gain,
        ties="first",
        empty_target_action="pos",
    )
    torch.testing.assert_close(ours.mean(dim=0), torch.tensor(reported), rtol=0, atol=1e-12)
    default = ndcg(preds, target, k=cutoffs, mask=mask, ties="first", empty_target_action="pos")
    assert not torch.allclose(default.mean(dim=0), ours.mean(dim=0))  # the table told apart


LABEL_CASES = [
    (
        torch.tensor([[0, 1, 6]]),
        r"Expected `target` values of at most 5 with `gain` a table of 6 per-label gains.*"
        r"but found 6",
    ),
    (
        torch.tensor([[0.0, 1.5, 2.0]]),
        r"Expected whole-number `target` labels with `gain` a table.*1\.5",
    ),
    (torch.tensor([[0, -1, 2]]), r"Expected `target` to be non-negative"),
]


@pytest.mark.parametrize(("target", "message"), LABEL_CASES, ids=["beyond", "fraction", "negative"])
@pytest.mark.parametrize(
    "name", ["ndcg", "NDCG", "lambdarank_loss", "SoftmaxLoss", "retrieval_ndcg"]
)
def test_labels_a_table_cannot_index_are_named(
    name: str, target: torch.Tensor, message: str
) -> None:
    preds = torch.tensor([[0.3, 0.2, 0.1]])
    calls: dict[str, Callable[[], Any]] = {
        "ndcg": lambda: ndcg(preds, target, gain=EXPONENTIAL),
        "NDCG": lambda: NDCG(gain=EXPONENTIAL).update(preds, target),
        "lambdarank_loss": lambda: lambdarank_loss(preds, target, gain=EXPONENTIAL),
        "SoftmaxLoss": lambda: SoftmaxLoss(gain=EXPONENTIAL)(preds, target),
        "retrieval_ndcg": lambda: retrieval_ndcg(
            preds[0], target[0], torch.zeros(3, dtype=torch.long), gain=EXPONENTIAL
        ),
    }
    with pytest.raises(ValueError, match=message):
        calls[name]()


def test_a_catalog_grade_outside_the_table_is_named() -> None:
    _catalog(EXPONENTIAL, 4)  # grades go to 5
    with pytest.raises(ValueError, match=re.escape("(`gain` a table of 5 per-label gains)")):
        _catalog(EXPONENTIAL[:5], 4)


@pytest.mark.parametrize(
    ("gain", "message"),
    [
        ([0.0, -1.0], r"`gain` as a table of per-label gains to hold finite, non-negative.*-1\.0"),
        ([0.0, float("nan")], r"`gain` as a table .*non-negative numbers, but got nan"),
        ([0.0, float("inf")], r"`gain` as a table .*non-negative numbers, but got inf"),
        ([], r"`gain` to be 'exponential', 'linear', a callable or a non-empty 1-D sequence"),
        ([[0.0, 1.0]], r"`gain` to be .* 1-D sequence of per-label gains"),
        (torch.ones(2, 2), r"`gain` to be .* 1-D sequence of per-label gains"),
        (["a"], r"`gain` to be .* 1-D sequence of per-label gains"),
        ("exp", r"`gain` to be one of 'exponential', 'linear', a callable or a sequence .*'exp'"),
    ],
    ids=["negative", "nan", "inf", "empty", "2-D", "2-D tensor", "strings", "unknown name"],
)
@pytest.mark.parametrize("owner", ["ndcg", "NDCG", "LambdaRankLoss", "softmax_loss"])
def test_bad_tables_are_named(owner: str, gain: Any, message: str) -> None:
    preds, target = torch.tensor([[0.3, 0.2]]), torch.tensor([[1, 0]])
    calls: dict[str, Callable[[], Any]] = {
        "ndcg": lambda: ndcg(preds, target, gain=gain),
        "NDCG": lambda: NDCG(gain=gain),
        "LambdaRankLoss": lambda: LambdaRankLoss(gain=gain),
        "softmax_loss": lambda: softmax_loss(preds, target, gain=gain),
    }
    with pytest.raises(ValueError, match=message):
        calls[owner]()


# --- A sparse or catalog target: absent items are label 0, which must gain nothing ------------


def _sparse_and_dense() -> tuple[torch.Tensor, torch.Tensor]:
    preds = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5], [0.1, 0.5, 0.3, 0.2, 0.4]])
    return preds, torch.tensor([[3, 0, 2, 0, 1], [0, 1, 0, 0, 0]])


ABSENT_ENTRY_POINTS: dict[str, Callable[[Any], Any]] = {
    "ndcg (COO)": lambda gain: ndcg(
        _sparse_and_dense()[0], _sparse_and_dense()[1].to_sparse(), gain=gain
    ),
    "dcg (CSR)": lambda gain: dcg(
        _sparse_and_dense()[0], _sparse_and_dense()[1].to_sparse_csr(), gain=gain
    ),
    "catalog_ndcg": lambda gain: _catalog(gain, 4),
    "NDCG.update_catalog": lambda gain: NDCG(k=4, gain=gain).update_catalog(
        torch.eye(2), torch.randn(5, 2), torch.tensor([[1], [3]])
    ),
}


@pytest.mark.parametrize("entry", ABSENT_ENTRY_POINTS)
@pytest.mark.parametrize(
    ("gain", "found"),
    [
        ([1.0, 5.0, 1.0, 2.0, 3.0, 4.0], "1.0"),
        (lambda y: y + 0.5, "0.5"),
        (lambda y: 2.0**y, "1.0"),
    ],
)
def test_a_gain_of_label_0_with_a_sparse_or_catalog_target_is_named(
    entry: str, gain: Any, found: str
) -> None:
    """Absent items are label 0 and never scored: a gain at 0 would be left out, not counted."""
    message = re.escape("to give label 0 a gain of 0 with a sparse or catalog target") + ".*"
    with pytest.raises(ValueError, match=message + re.escape(f"`gain`(0) is {found}")):
        ABSENT_ENTRY_POINTS[entry](gain)


def test_a_callable_gain_of_label_0_is_not_asked_unchecked() -> None:
    """``validate_args=False`` asks nothing of it (the number is then the caller's to trust)."""
    generator = torch.Generator().manual_seed(5)
    queries, items = torch.randn(3, 4, generator=generator), torch.randn(9, 4, generator=generator)
    relevant = torch.tensor([[0, 2], [1, 4], [3, -1]])
    values = catalog_ndcg(
        queries, items, relevant, k=4, gain=lambda y: y + 0.5, validate_args=False
    )
    assert values.shape == (3,)
    with pytest.raises(ValueError, match=re.escape("`gain`(0) is 0.5")):
        catalog_ndcg(queries, items, relevant, k=4, gain=lambda y: y + 0.5)


@pytest.mark.parametrize("entry", ABSENT_ENTRY_POINTS)
@pytest.mark.parametrize("gain", [lambda y: y.max(), lambda y: 0.0])
def test_a_misshapen_callable_gain_with_a_sparse_or_catalog_target_is_named(
    entry: str, gain: Any
) -> None:
    with pytest.raises(ValueError, match=r"`gain` to give a tensor of the shape of the labels"):
        ABSENT_ENTRY_POINTS[entry](gain)


@pytest.mark.budget
def test_a_callable_gain_of_label_0_is_not_asked_where_torch_compile_traces() -> None:
    """In a traced graph (no graph break), or where it cannot take a CPU label, it is not asked."""
    from torch_ndcg import _validation

    asked: list[torch.Tensor] = []

    def gain(labels: torch.Tensor) -> torch.Tensor:
        asked.append(labels)
        return labels + 0.5

    checked = SimpleNamespace(gain=gain, validate_args=True)
    compiled = torch.compile(
        lambda x: (_validation.check_absent_gain(checked, torch.float32), x + 1)[1],
        fullgraph=True,
        dynamic=True,
        backend="aot_eager",
    )
    for length in (2, 5):  # two lengths: the traced graph is not asked again either
        torch.testing.assert_close(compiled(torch.zeros(length)), torch.ones(length))
    assert not asked
    with pytest.raises(ValueError, match=re.escape("`gain`(0) is 0.5")):
        _validation.check_absent_gain(checked, torch.float32)
    # A gain that cannot take a CPU label (it holds another device's tensors) is not judged.
    other = SimpleNamespace(gain=lambda y: y + torch.ones(1, device="meta"), validate_args=True)
    _validation.check_absent_gain(other, torch.float32)


@pytest.mark.parametrize(
    "gain", [NON_MONOTONE, lambda y: y**2, "linear", "exponential", (0.0, 1.0, 3.0, 7.0, 1.5, 2.0)]
)
def test_a_sparse_target_is_the_dense_target_where_label_0_gains_nothing(gain: Any) -> None:
    preds, target = _sparse_and_dense()
    dense = ndcg(preds, target, gain=gain, k=[1, 3, 5])
    torch.testing.assert_close(ndcg(preds, target.to_sparse(), gain=gain, k=[1, 3, 5]), dense)
    torch.testing.assert_close(ndcg(preds, target.to_sparse_csr(), gain=gain, k=[1, 3, 5]), dense)
