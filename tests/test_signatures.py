"""Run-time signatures list every keyword with its documented default.

The defaults are written out here from the documentation (``docs/``, the docstrings), not read
from the package, so that a default that moved, or a keyword that vanished behind ``**kwargs``,
fails; only the metrics take ``**kwargs``, for torchmetrics' own ``Metric`` keywords.
"""

from __future__ import annotations

import inspect
import pydoc
from typing import Any

import pytest

import torch_ndcg
from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    ListMLELoss,
    NeuralNDCGLoss,
    PLRankLoss,
    RankNetLoss,
    RetrievalNDCG,
    SoftmaxLoss,
    UnbiasedLambdaRankLoss,
    XENDCGLoss,
)

DOCUMENTED_DEFAULTS: dict[str, Any] = {
    "mask": None,
    "exclude": None,
    "retrieved": None,
    "weight": None,
    "noise": None,
    "generator": None,
    "k": None,
    "sigma": 1.0,
    "weighting": "lambdarank",
    "mu": 10.0,
    "temperature": 1.0,
    "max_iter": 50,
    "tol": 1e-06,
    "bias_norm": 2.0,
    "momentum": 1.0,
    "match_exposure": True,
    "num_samples": 100,
    "position_aware": False,
    "gain": "exponential",
    "discount": "log2",
    "ties": "average",
    "empty_target_action": "neg",
    "reduction": "mean",
    "ignore_index": None,
    "validate_args": True,
    "score_fn": None,
    "chunk_size": None,
    "memory_budget": None,
    "item_offset": 0,
    "process_group": None,
    "bootstrap_resamples": 1000,
    "bootstrap_seed": 0,
    "aggregation": "mean",
    "confidence": None,
}
LIST_OPTIONS = {"k", "gain", "discount", "ties", "empty_target_action", "validate_args"}
LOSS_OPTIONS = {"k", "gain", "discount", "reduction", "ignore_index", "validate_args"}
LISTWISE_OPTIONS = LOSS_OPTIONS - {"k", "discount"}  # the softmax losses: no cut-off, no discount
# Each entry point and the keywords it must list (each with its documented default).
ENTRY_POINTS: dict[str, tuple[Any, set[str]]] = {
    "ndcg": (torch_ndcg.ndcg, LIST_OPTIONS | {"mask", "exclude", "retrieved", "ignore_index"}),
    "dcg": (torch_ndcg.dcg, {"k", "gain", "discount", "ties", "mask", "exclude", "ignore_index"}),
    "retrieval_ndcg": (torch_ndcg.retrieval_ndcg, LIST_OPTIONS | {"retrieved", "ignore_index"}),
    "catalog_ndcg": (
        torch_ndcg.catalog_ndcg,
        (LIST_OPTIONS - {"k"})
        | {"exclude", "score_fn", "chunk_size", "memory_budget", "item_offset", "process_group"},
    ),
    "lambdarank_loss": (
        torch_ndcg.lambdarank_loss,
        LOSS_OPTIONS | {"mask", "weight", "sigma", "weighting", "mu"},
    ),
    "approx_ndcg_loss": (
        torch_ndcg.approx_ndcg_loss,
        LOSS_OPTIONS | {"mask", "weight", "temperature"},
    ),
    "neural_ndcg_loss": (
        torch_ndcg.neural_ndcg_loss,
        LOSS_OPTIONS | {"mask", "weight", "temperature", "max_iter", "tol"},
    ),
    "softmax_loss": (torch_ndcg.softmax_loss, LISTWISE_OPTIONS | {"mask", "weight"}),
    "xe_ndcg_loss": (
        torch_ndcg.xe_ndcg_loss,
        LISTWISE_OPTIONS | {"mask", "weight", "noise", "generator"},
    ),
    "ranknet_loss": (
        torch_ndcg.ranknet_loss,
        LISTWISE_OPTIONS - {"gain"} | {"mask", "weight", "sigma"},
    ),
    "listmle_loss": (
        torch_ndcg.listmle_loss,
        LISTWISE_OPTIONS - {"gain"} | {"mask", "weight", "position_aware"},
    ),
    "NDCG": (NDCG, LIST_OPTIONS | {"ignore_index", "confidence"}),
    "NDCG.update_catalog": (
        NDCG.update_catalog,
        {"exclude", "score_fn", "chunk_size", "memory_budget", "item_offset", "process_group"},
    ),
    "RetrievalNDCG": (
        RetrievalNDCG,
        LIST_OPTIONS
        | {"ignore_index", "aggregation", "confidence", "bootstrap_resamples", "bootstrap_seed"},
    ),
    "LambdaRankLoss": (LambdaRankLoss, LOSS_OPTIONS | {"sigma", "weighting", "mu"}),
    "ApproxNDCGLoss": (ApproxNDCGLoss, LOSS_OPTIONS | {"temperature"}),
    "NeuralNDCGLoss": (NeuralNDCGLoss, LOSS_OPTIONS | {"temperature", "max_iter", "tol"}),
    "pl_rank_loss": (
        torch_ndcg.pl_rank_loss,
        LOSS_OPTIONS | {"mask", "weight", "num_samples", "generator"},
    ),
    "PLRankLoss": (PLRankLoss, LOSS_OPTIONS | {"num_samples", "generator"}),
    "sample_rankings": (torch_ndcg.sample_rankings, {"k", "mask", "generator"}),
    "UnbiasedLambdaRankLoss": (
        UnbiasedLambdaRankLoss,
        LOSS_OPTIONS | {"sigma", "bias_norm", "momentum", "match_exposure"},
    ),
    "SoftmaxLoss": (SoftmaxLoss, LISTWISE_OPTIONS),
    "XENDCGLoss": (XENDCGLoss, LISTWISE_OPTIONS),
    "XENDCGLoss.forward": (XENDCGLoss.forward, {"mask", "weight", "noise", "generator"}),
    "RankNetLoss": (RankNetLoss, LISTWISE_OPTIONS - {"gain"} | {"sigma"}),
    "ListMLELoss": (ListMLELoss, LISTWISE_OPTIONS - {"gain"} | {"position_aware"}),
}
# torchmetrics' own `Metric` keywords: the metrics pass them through `**kwargs`.
TORCHMETRICS_KEYWORDS = {"compute_on_cpu", "dist_sync_on_step", "sync_on_compute"}


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_signature_lists_each_keyword_with_its_documented_default(name: str) -> None:
    function, expected = ENTRY_POINTS[name]
    parameters = inspect.signature(function).parameters
    missing = expected - parameters.keys()
    assert not missing, f"{name} does not list {sorted(missing)}"
    for keyword in expected:
        assert parameters[keyword].default == DOCUMENTED_DEFAULTS[keyword], (name, keyword)
    var_keyword = [p for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    assert bool(var_keyword) == (name in ("NDCG", "RetrievalNDCG")), name


@pytest.mark.parametrize("cls", [NDCG, RetrievalNDCG])
def test_metrics_take_torchmetrics_keywords(cls: Any) -> None:
    for keyword in TORCHMETRICS_KEYWORDS:
        metric = cls(k=3, **{keyword: True})
        assert getattr(metric, keyword) is True, keyword


def test_required_arguments_have_no_default() -> None:
    assert (
        inspect.signature(torch_ndcg.catalog_ndcg).parameters["k"].default
        is inspect.Parameter.empty
    )
    positions = inspect.signature(UnbiasedLambdaRankLoss).parameters["num_positions"]
    assert positions.default is inspect.Parameter.empty


def test_help_text_shows_the_defaults() -> None:
    text = pydoc.render_doc(torch_ndcg.ndcg, renderer=pydoc.plaintext)
    (line,) = [line for line in text.splitlines() if line.startswith("ndcg(")]
    assert "**options" not in line
    assert "ties: Literal['average', 'first'] = 'average'" in line


def test_spelled_signature_binds_the_calls_users_make() -> None:
    signature = inspect.signature(torch_ndcg.LambdaRankLoss)
    bound = signature.bind(k=5, sigma=2.0)
    assert bound.arguments == {"k": 5, "sigma": 2.0}
    with pytest.raises(TypeError):
        signature.bind(sigmaa=2.0)
