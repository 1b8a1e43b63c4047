"""Code ported from torchmetrics, scikit-learn, allRank, TF-Ranking or LightGBM: pointed to ours."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_ndcg
from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    PLRankLoss,
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

METRICS = ["ndcg", "dcg", "retrieval_ndcg", "NDCG", "RetrievalNDCG"]
METRIC_CLASSES = ["NDCG", "RetrievalNDCG"]  # other keywords go on to torchmetrics
LAMBDARANK = ["lambdarank_loss", "LambdaRankLoss"]
APPROX = ["approx_ndcg_loss", "ApproxNDCGLoss"]
LOSSES = LAMBDARANK + APPROX

# (name, the owners that point it to an equivalent, the pointer)
PORTED = [
    ("top_k", METRICS, r"did you mean `k` \(torchmetrics' `top_k`; a sequence of cut-offs works\)"),
    ("topn", METRICS, r"did you mean `k` \(TF-Ranking's `topn`; a sequence"),
    ("eval_at", METRICS, r"did you mean `k` \(LightGBM's `eval_at`; a sequence"),
    ("top_k", LOSSES, r"did you mean `k` \(torchmetrics' `top_k`; one int\)"),
    ("eval_at", LOSSES, r"did you mean `k` \(LightGBM's `eval_at`; one int\)"),
    ("ignore_ties", METRICS, r"did you mean `ties`='first' for scikit-learn's `ignore_ties=True`"),
    ("padded_value_indicator", METRICS + LOSSES, r"did you mean `ignore_index` \(allRank's"),
    ("label_gain", METRICS + LOSSES, r"did you mean `gain`, which takes a sequence of per-label"),
    ("eps", LOSSES, r"did you mean nothing: no epsilon is needed"),
    ("weighing_scheme", LAMBDARANK, r"did you mean `weighting` \(allRank's lambdaRank_scheme"),
    ("alpha", APPROX, r"did you mean `temperature`=1/alpha"),
]
CASES = [(name, owner, hint) for name, owners, hint in PORTED for owner in owners]
# A name another owner has an equivalent for, that this one has none for: named, no pointer.
UNRELATED = (
    [("weighing_scheme", owner) for owner in METRICS + APPROX]
    + [("alpha", owner) for owner in METRICS + LAMBDARANK]
    + [("ignore_ties", owner) for owner in LOSSES]
)


@pytest.mark.parametrize(("name", "owner", "hint"), CASES)
def test_other_libraries_names_point_to_ours(name: str, owner: str, hint: str) -> None:
    message = rf"^`{owner}` got an unexpected keyword argument `{name}`: {hint}"
    with pytest.raises(TypeError, match=message):
        CALLS[owner](**{name: 1})


@pytest.mark.parametrize(("name", "owner"), UNRELATED)
def test_no_pointer_to_an_option_the_owner_lacks(name: str, owner: str) -> None:
    if owner in ("NDCG", "RetrievalNDCG"):  # other names go on to torchmetrics
        with pytest.raises(ValueError, match=f"Unexpected keyword arguments: `{name}`"):
            CALLS[owner](**{name: 1})
        return
    with pytest.raises(
        TypeError, match=rf"^`{owner}` got an unexpected keyword argument `{name}`\.$"
    ):
        CALLS[owner](**{name: 1})


# Every entry point that takes its keywords as `**options: Unpack[...]`.
KEYWORD_CALLS: dict[str, Callable[..., Any]] = {
    **CALLS,
    "neural_ndcg_loss": lambda **kw: neural_ndcg_loss(PREDS, TARGET, **kw),
    "NeuralNDCGLoss": lambda **kw: NeuralNDCGLoss(**kw),
    "UnbiasedLambdaRankLoss": lambda **kw: UnbiasedLambdaRankLoss(num_positions=3, **kw),
    "pl_rank_loss": lambda **kw: pl_rank_loss(PREDS, TARGET, **kw),
    "PLRankLoss": lambda **kw: PLRankLoss(**kw),
    "ranknet_loss": lambda **kw: torch_ndcg.ranknet_loss(PREDS, TARGET, **kw),
    "RankNetLoss": lambda **kw: torch_ndcg.RankNetLoss(**kw),
    "listmle_loss": lambda **kw: torch_ndcg.listmle_loss(PREDS, TARGET, **kw),
    "ListMLELoss": lambda **kw: torch_ndcg.ListMLELoss(**kw),
    "catalog_ndcg": lambda **kw: catalog_ndcg(PREDS, PREDS.T, TARGET, k=1, **kw),
    "NDCG.update_catalog": lambda **kw: NDCG().update_catalog(PREDS, PREDS.T, TARGET, **kw),
}


@pytest.mark.parametrize("owner", [name for name in KEYWORD_CALLS if name not in METRIC_CLASSES])
def test_unknown_names_are_named(owner: str) -> None:
    with pytest.raises(TypeError, match=rf"^`{owner}` got an unexpected keyword argument `kk`\.$"):
        KEYWORD_CALLS[owner](kk=3)


@pytest.mark.parametrize("owner", list(KEYWORD_CALLS))
def test_a_keyword_misspelt_after_good_ones_raises(owner: str) -> None:
    # The keywords given meet their defaults in one place: one that is no option is never
    # taken as one (nor passed over), wherever it stands among good ones.
    good = {"validate_args": True} if owner != "NDCG.update_catalog" else {"item_offset": 0}
    error = ValueError if owner in METRIC_CLASSES else TypeError  # torchmetrics' own error
    with pytest.raises(error, match="ignore_idx"):
        KEYWORD_CALLS[owner](**good, ignore_idx=-1)


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


def test_minus_one_labels_suggest_ignore_index() -> None:
    """On the CPU the error names the value."""
    with pytest.raises(ValueError, match=r"pass `ignore_index`=-1\)"):
        ndcg(PREDS, torch.tensor([[1, 0, -1]]))


@pytest.mark.budget
def test_minus_one_labels_suggest_ignore_index_on_an_accelerator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On an accelerator it is a device-side assertion, with the same hint."""
    from tests.private_paths import take_accelerator_paths

    take_accelerator_paths(monkeypatch)
    with pytest.raises(RuntimeError, match=r"pass `ignore_index`=-1\)"):
        ndcg(PREDS, torch.tensor([[1, 0, -1]]))


@pytest.mark.parametrize(
    ("name", "owner"),
    [("padded_value_indicator", "catalog_ndcg"), ("weighing_scheme", "UnbiasedLambdaRankLoss")],
)
def test_no_pointer_where_the_owner_lacks_our_equivalent(name: str, owner: str) -> None:
    """`catalog_ndcg` takes no `ignore_index`, the debiased loss no `weighting`."""
    with pytest.raises(
        TypeError, match=rf"^`{owner}` got an unexpected keyword argument `{name}`\.$"
    ):
        KEYWORD_CALLS[owner](**{name: 1})
