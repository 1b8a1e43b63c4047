"""Every tensor of a call on the device of `preds`: another device gets an error naming it.

The meta device stands in for an accelerator (CI has no GPU): each case builds ``preds`` on
one device and one other argument on the other, both ways round, and expects a ``ValueError``
that names the argument, its device and the device it should be on, decided from metadata
before any work (torch's own "Tensor on device cpu is not on the expected device meta!" named
no argument).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_ndcg
from tests.references import ndcg_one_list
from torch_ndcg import NDCG, RetrievalNDCG, UnbiasedLambdaRankLoss
from torch_ndcg.functional import (
    approx_ndcg_loss,
    catalog_ndcg,
    dcg,
    lambdarank_loss,
    ndcg,
    neural_ndcg_loss,
    paired_randomization_test,
    paired_t_test,
    pl_rank_loss,
    retrieval_ndcg,
    sample_rankings,
    simulate_clicks,
    softmax_loss,
    unpad_by_query,
    xe_ndcg_loss,
)

Device = str
Call = Callable[[Device, Device], Any]


def scores(d: Device) -> torch.Tensor:
    return torch.rand(2, 4, device=d)


def labels(d: Device) -> torch.Tensor:
    return torch.tensor([[3, 2, 0, 1], [0, 1, 1, 0]]).to(d)


def flags(d: Device) -> torch.Tensor:
    return torch.ones(2, 4, dtype=torch.bool, device=d)


def ones(d: Device) -> torch.Tensor:
    return torch.ones(2, 4, device=d)


def shown(d: Device) -> torch.Tensor:
    return torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]]).to(d)


def clicks(d: Device) -> torch.Tensor:
    return torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]]).to(d)


def ids(d: Device) -> torch.Tensor:
    return torch.tensor([[0, 0, 1, 1], [1, 2, 2, 2]]).to(d)


def no_exclusions(d: Device) -> torch.Tensor:
    return torch.zeros(2, 4, dtype=torch.bool, device=d)


def sparse_labels(d: Device) -> torch.Tensor:
    indices = torch.tensor([[0, 0, 1], [0, 2, 3]]).to(d)
    return torch.sparse_coo_tensor(
        indices, torch.tensor([2.0, 1.0, 3.0]).to(d), (2, 4), check_invariants=False
    )


def relevant(d: Device) -> torch.Tensor:
    return torch.tensor([[0, 1], [2, -1]]).to(d)


def counts(d: Device) -> torch.Tensor:
    return torch.ones(2, 4, 4, device=d)


LOSS_FUNCTIONS = {
    "approx_ndcg_loss": approx_ndcg_loss,
    "lambdarank_loss": lambdarank_loss,
    "neural_ndcg_loss": neural_ndcg_loss,
    "pl_rank_loss": pl_rank_loss,
    "ranknet_loss": torch_ndcg.ranknet_loss,
    "listmle_loss": torch_ndcg.listmle_loss,
    "softmax_loss": softmax_loss,
    "xe_ndcg_loss": xe_ndcg_loss,
}
LOSS_MODULES = {
    name: getattr(torch_ndcg, name)
    for name in (
        "ApproxNDCGLoss",
        "LambdaRankLoss",
        "NeuralNDCGLoss",
        "PLRankLoss",
        "RankNetLoss",
        "ListMLELoss",
        "SoftmaxLoss",
        "XENDCGLoss",
    )
}


def unbiased() -> UnbiasedLambdaRankLoss:
    return UnbiasedLambdaRankLoss(num_positions=4)


# (case id, argument named, argument it must be with, call(device of that one, of the other)).
CASES: list[tuple[str, str, str, Call]] = [
    ("ndcg", "target", "preds", lambda p, o: ndcg(scores(p), labels(o))),
    ("ndcg", "mask", "preds", lambda p, o: ndcg(scores(p), labels(p), mask=flags(o))),
    ("ndcg", "exclude", "preds", lambda p, o: ndcg(scores(p), labels(p), exclude=no_exclusions(o))),
    ("ndcg", "retrieved", "preds", lambda p, o: ndcg(scores(p), labels(p), retrieved=flags(o))),
    ("ndcg sparse", "target", "preds", lambda p, o: ndcg(scores(p), sparse_labels(o), k=2)),
    (
        "ndcg sparse",
        "exclude",
        "preds",
        lambda p, o: ndcg(scores(p), sparse_labels(p), k=2, exclude=no_exclusions(o)),
    ),
    (
        "ndcg sparse",
        "mask",
        "preds",
        lambda p, o: ndcg(scores(p), sparse_labels(p), k=2, mask=flags(o)),
    ),
    ("dcg", "target", "preds", lambda p, o: dcg(scores(p), labels(o))),
    ("dcg", "mask", "preds", lambda p, o: dcg(scores(p), labels(p), mask=flags(o))),
    ("dcg", "exclude", "preds", lambda p, o: dcg(scores(p), labels(p), exclude=no_exclusions(o))),
    (
        "retrieval_ndcg",
        "target",
        "preds",
        lambda p, o: retrieval_ndcg(scores(p), labels(o), ids(p)),
    ),
    (
        "retrieval_ndcg",
        "indexes",
        "preds",
        lambda p, o: retrieval_ndcg(scores(p), labels(p), ids(o)),
    ),
    (
        "retrieval_ndcg",
        "retrieved",
        "preds",
        lambda p, o: retrieval_ndcg(scores(p), labels(p), ids(p), retrieved=flags(o)),
    ),
    ("NDCG.update", "target", "preds", lambda p, o: NDCG(k=2).to(p).update(scores(p), labels(o))),
    (
        "NDCG.update",
        "mask",
        "preds",
        lambda p, o: NDCG(k=2).to(p).update(scores(p), labels(p), flags(o)),
    ),
    (
        "NDCG.update",
        "exclude",
        "preds",
        lambda p, o: NDCG(k=2).to(p).update(scores(p), labels(p), exclude=no_exclusions(o)),
    ),
    (
        "NDCG.update",
        "retrieved",
        "preds",
        lambda p, o: NDCG(k=2).to(p).update(scores(p), labels(p), retrieved=flags(o)),
    ),
    (
        "RetrievalNDCG.update",
        "target",
        "preds",
        lambda p, o: RetrievalNDCG(k=2).to(p).update(scores(p), labels(o), ids(p)),
    ),
    (
        "RetrievalNDCG.update",
        "indexes",
        "preds",
        lambda p, o: RetrievalNDCG(k=2).to(p).update(scores(p), labels(p), ids(o)),
    ),
    (
        "RetrievalNDCG.update",
        "retrieved",
        "preds",
        lambda p, o: RetrievalNDCG(k=2).to(p).update(scores(p), labels(p), ids(p), flags(o)),
    ),
    *[
        case
        for name, loss in LOSS_FUNCTIONS.items()
        for case in (
            (name, "target", "preds", lambda p, o, f=loss: f(scores(p), labels(o))),
            (name, "mask", "preds", lambda p, o, f=loss: f(scores(p), labels(p), mask=flags(o))),
            (name, "weight", "preds", lambda p, o, f=loss: f(scores(p), labels(p), weight=ones(o))),
        )
    ],
    *[
        case
        for name, module in LOSS_MODULES.items()
        for case in (
            (name, "target", "preds", lambda p, o, m=module: m()(scores(p), labels(o))),
            (name, "mask", "preds", lambda p, o, m=module: m()(scores(p), labels(p), flags(o))),
            (
                name,
                "weight",
                "preds",
                lambda p, o, m=module: m()(scores(p), labels(p), weight=ones(o)),
            ),
        )
    ],
    (
        "xe_ndcg_loss",
        "noise",
        "preds",
        lambda p, o: xe_ndcg_loss(scores(p), labels(p), noise=ones(o) / 2),
    ),
    (
        "XENDCGLoss",
        "noise",
        "preds",
        lambda p, o: torch_ndcg.XENDCGLoss()(scores(p), labels(p), noise=ones(o) / 2),
    ),
    (
        "UnbiasedLambdaRankLoss",
        "clicks",
        "preds",
        lambda p, o: unbiased()(scores(p), clicks(o), shown(p)),
    ),
    (
        "UnbiasedLambdaRankLoss",
        "positions",
        "preds",
        lambda p, o: unbiased()(scores(p), clicks(p), shown(o)),
    ),
    (
        "UnbiasedLambdaRankLoss",
        "mask",
        "preds",
        lambda p, o: unbiased()(scores(p), clicks(p), shown(p), flags(o)),
    ),
    (
        "UnbiasedLambdaRankLoss.aggregated",
        "clicks",
        "preds",
        lambda p, o: unbiased().aggregated(scores(p), counts(o), counts(p)),
    ),
    (
        "UnbiasedLambdaRankLoss.aggregated",
        "views",
        "preds",
        lambda p, o: unbiased().aggregated(scores(p), counts(p), counts(o)),
    ),
    (
        "UnbiasedLambdaRankLoss.aggregated",
        "mask",
        "preds",
        lambda p, o: unbiased().aggregated(scores(p), counts(p), counts(p), flags(o)),
    ),
    ("sample_rankings", "mask", "preds", lambda p, o: sample_rankings(scores(p), 2, mask=flags(o))),
    ("simulate_clicks", "positions", "target", lambda p, o: simulate_clicks(labels(p), shown(o))),
    (
        "simulate_clicks",
        "mask",
        "target",
        lambda p, o: simulate_clicks(labels(p), shown(p), mask=flags(o)),
    ),
    (
        "simulate_clicks",
        "examination",
        "target",
        lambda p, o: simulate_clicks(labels(p), shown(p), examination=torch.ones(4, device=o)),
    ),
    (
        "catalog_ndcg",
        "items",
        "queries",
        lambda p, o: catalog_ndcg(
            torch.rand(2, 3, device=p), torch.rand(5, 3, device=o), relevant(p), k=2
        ),
    ),
    (
        "catalog_ndcg",
        "relevant",
        "queries",
        lambda p, o: catalog_ndcg(
            torch.rand(2, 3, device=p), torch.rand(5, 3, device=p), relevant(o), k=2
        ),
    ),
    (
        "catalog_ndcg",
        "exclude",
        "queries",
        lambda p, o: catalog_ndcg(
            torch.rand(2, 3, device=p),
            torch.rand(5, 3, device=p),
            relevant(p),
            k=2,
            exclude=torch.tensor([[3], [4]]).to(o),
        ),
    ),
    (
        "paired_t_test",
        "b",
        "a",
        lambda p, o: paired_t_test(torch.rand(5, device=p), torch.rand(5, device=o)),
    ),
    (
        "paired_t_test",
        "a[1]",
        "a",
        lambda p, o: paired_t_test(
            (torch.rand(5, device=p), torch.arange(5, device=o)),
            (torch.rand(5, device=p), torch.arange(5, device=p)),
        ),
    ),
    (
        "paired_t_test",
        "b[1]",
        "a",
        lambda p, o: paired_t_test(
            (torch.rand(5, device=p), torch.arange(5, device=p)),
            (torch.rand(5, device=p), torch.arange(5, device=o)),
        ),
    ),
    (
        "paired_randomization_test",
        "b",
        "a",
        lambda p, o: paired_randomization_test(
            {"ndcg@5": torch.rand(5, device=p)}, {"ndcg@5": torch.rand(5, device=o)}
        ),
    ),
    (
        "unpad_by_query",
        "slots",
        "padded",
        lambda p, o: unpad_by_query(torch.rand(2, 3, device=p), torch.tensor([0, 1, 4]).to(o)),
    ),
]


@pytest.mark.parametrize(("there", "elsewhere"), [("meta", "cpu"), ("cpu", "meta")])
@pytest.mark.parametrize(
    ("owner", "name", "of", "call"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_an_argument_on_another_device_is_named(
    owner: str, name: str, of: str, call: Call, there: Device, elsewhere: Device
) -> None:
    message = f"Expected `{name}` on the device of `{of}` ({there}), but got {elsewhere}."
    with pytest.raises(ValueError, match=re.escape(message)):
        call(there, elsewhere)


def test_update_catalog_names_the_queries_off_the_metrics_device() -> None:
    message = "Expected `queries` on the metric's device cpu, but got meta"
    with pytest.raises(ValueError, match=re.escape(message)):
        NDCG(k=2).update_catalog(
            torch.rand(2, 3, device="meta"), torch.rand(5, 3, device="meta"), relevant("meta")
        )


# Guards of what stays allowed (they pass before and after: not regression tests).


def test_a_sparse_target_on_the_device_of_preds_is_scored() -> None:
    preds = torch.tensor([[0.4, 0.9, 0.1, 0.3], [0.2, 0.8, 0.5, 0.7]])
    dense = sparse_labels("cpu").to_dense()
    expected = [ndcg_one_list(p.tolist(), t.tolist(), 2) for p, t in zip(preds, dense, strict=True)]
    got = ndcg(preds, sparse_labels("cpu"), k=2)
    assert got.tolist() == pytest.approx(expected, rel=1e-6)


def test_a_score_fn_may_take_its_items_from_another_device() -> None:
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    items = torch.tensor([[0.1, 0.9], [0.5, 0.5], [0.9, 0.8], [0.0, 0.2], [0.3, 0.1]])
    on_meta = items.to("meta")  # the function scores its own copy: only the chunk's size is read

    def score_fn(users: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        return users @ items[: chunk.shape[0]].T

    got = catalog_ndcg(queries, on_meta, relevant("cpu"), k=2, score_fn=score_fn)
    grades = [[1, 1, 0, 0, 0], [0, 0, 1, 0, 0]]
    expected = [
        ndcg_one_list((items @ q).tolist(), g, 2) for q, g in zip(queries, grades, strict=True)
    ]
    assert got.tolist() == pytest.approx(expected, rel=1e-6)
    assert all(math.isfinite(value) for value in got.tolist())
