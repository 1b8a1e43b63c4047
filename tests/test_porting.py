"""Code ported from torchmetrics, scikit-learn, allRank, TF-Ranking or LightGBM: pointed to ours."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.conftest import take_accelerator_paths
from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    RetrievalNDCG,
    approx_ndcg_loss,
    dcg,
    lambdarank_loss,
    ndcg,
    retrieval_ndcg,
)

PREDS = torch.tensor([[0.3, 0.2, 0.1]])
TARGET = torch.tensor([[1, 0, 2]])

CALLS: dict[str, Callable[..., Any]] = {
    "ndcg": lambda **kw: ndcg(PREDS, TARGET, **kw),
    "dcg": lambda **kw: dcg(PREDS, TARGET, **kw),
    "retrieval_ndcg": lambda **kw: retrieval_ndcg(
        PREDS[0], TARGET[0], torch.zeros(3, dtype=torch.long), **kw
    ),
    "lambdarank_loss": lambda **kw: lambdarank_loss(PREDS, TARGET, **kw),
    "approx_ndcg_loss": lambda **kw: approx_ndcg_loss(PREDS, TARGET, **kw),
    "NDCG": lambda **kw: NDCG(**kw),
    "RetrievalNDCG": lambda **kw: RetrievalNDCG(**kw),
    "LambdaRankLoss": lambda **kw: LambdaRankLoss(**kw),
    "ApproxNDCGLoss": lambda **kw: ApproxNDCGLoss(**kw),
}

PORTED = {
    "top_k": r"did you mean `k` \(torchmetrics' `top_k`\)",
    "topn": r"did you mean `k` \(TF-Ranking's `topn`\)",
    "eval_at": r"did you mean `k` \(LightGBM's `eval_at`",
    "ignore_ties": r"did you mean `ties`='first' for scikit-learn's `ignore_ties=True`",
    "padded_value_indicator": r"did you mean `ignore_index` \(allRank's",
    "weighing_scheme": r"did you mean `weighting` \(allRank's lambdaRank_scheme = 'lambdarank'",
    "alpha": r"did you mean `temperature`=1/alpha",
    "label_gain": r"did you mean a callable `gain`",
}


@pytest.mark.parametrize("owner", list(CALLS))
@pytest.mark.parametrize("name", list(PORTED))
def test_other_libraries_names_point_to_ours(owner: str, name: str) -> None:
    message = rf"`{owner}` got an unexpected keyword argument `{name}`: {PORTED[name]}"
    with pytest.raises(TypeError, match=message):
        CALLS[owner](**{name: 1})


@pytest.mark.parametrize("owner", ["ndcg", "LambdaRankLoss", "approx_ndcg_loss"])
def test_unknown_names_are_named(owner: str) -> None:
    with pytest.raises(TypeError, match=rf"^`{owner}` got an unexpected keyword argument `kk`\.$"):
        CALLS[owner](kk=3)


def test_metrics_pass_other_keywords_to_torchmetrics() -> None:
    with pytest.raises(ValueError, match="Unexpected keyword arguments: `kk`"):
        NDCG(kk=3)
    assert NDCG(k=3, sync_on_compute=False).sync_on_compute is False


def test_labels_first_gets_the_order_explained() -> None:
    """scikit-learn and TF-Ranking take (labels, scores): integer "scores" meet float labels."""
    with pytest.raises(TypeError, match="scores come first, labels second"):
        ndcg(TARGET, PREDS)
    with pytest.raises(TypeError, match=r"got dtype torch.int64\.$"):
        ndcg(TARGET, TARGET)


@pytest.mark.parametrize("paths", ["cpu", "accelerator"])
def test_minus_one_labels_suggest_ignore_index(paths: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU the error names the value; on an accelerator it is a device-side assertion."""
    if paths == "accelerator":
        take_accelerator_paths(monkeypatch)
    with pytest.raises((ValueError, RuntimeError), match=r"pass `ignore_index`=-1\)"):
        ndcg(PREDS, torch.tensor([[1, 0, -1]]))
