"""``torch.compile`` of the entry points that other files do not compile, as
``docs/gpu-and-compile.md`` promises: `dcg`, ``RetrievalNDCG.update``, `retrieval_ndcg` and
`catalog_ndcg` equal to eager at two list lengths (catalog sizes), and the compiled losses raising
a ``RuntimeError`` with eager's message on NaN scores and negative labels.

The backend is ``aot_eager``, as in ``tests/test_checked_once.py``: Dynamo and AOT autograd are
where symbolic sizes and the device-side checks meet the graph; inductor's code generation adds
seconds per test, not coverage.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.conftest import needs_torch_2_13_to_compile_losses
from torch_ndcg import (
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    RetrievalNDCG,
    UnbiasedLambdaRankLoss,
    catalog_ndcg,
    dcg,
)
from torch_ndcg.functional import retrieval_ndcg

BACKEND = "aot_eager"

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def lists(gen: torch.Generator, n: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores with ties (small integers) and labels 0..3."""
    preds = torch.randint(0, 4, (n, length), generator=gen).float()
    return preds, torch.randint(0, 4, (n, length), generator=gen)


def test_compiled_dcg_at_two_lengths_equals_eager() -> None:
    torch._dynamo.reset()
    call = torch.compile(lambda p, t: dcg(p, t, k=[1, 3]), fullgraph=True, backend=BACKEND)
    gen = torch.Generator().manual_seed(0)
    for length in (5, 9):
        preds, target = lists(gen, 4, length)
        torch.testing.assert_close(call(preds, target), dcg(preds, target, k=[1, 3]))


def rows(gen: torch.Generator, n: int, queries: int) -> tuple[torch.Tensor, ...]:
    """Flat rows of ``queries`` queries with sparse ids, in no order."""
    preds, target = lists(gen, 1, n)
    indexes = torch.randint(0, queries, (n,), generator=gen) * 1_000 - 7
    return preds[0], target[0], indexes


def test_compiled_retrieval_update_at_two_lengths_equals_eager() -> None:
    """Without graph breaks (``fullgraph=True``), as the docs promise."""
    torch._dynamo.reset()
    eager, compiled = RetrievalNDCG(k=[1, 3]), RetrievalNDCG(k=[1, 3])
    update = torch.compile(compiled.update, fullgraph=True, backend=BACKEND)
    gen = torch.Generator().manual_seed(1)
    for n in (12, 20):
        batch = rows(gen, n, queries=4)
        update(*batch)
        eager.update(*batch)
    got, expected = compiled.compute(), eager.compute()
    assert isinstance(got, dict)
    assert isinstance(expected, dict)
    torch.testing.assert_close(got, expected)
    assert 0 < expected["ndcg@3"] < 1


def test_compiled_retrieval_ndcg_at_two_sizes_equals_eager() -> None:
    """Graph breaks allowed: the grouping by query reads sizes back (not a hot path). Dynamic
    shapes from the first call: one compilation serves both sizes."""
    torch._dynamo.reset()
    call = torch.compile(
        lambda p, t, i: retrieval_ndcg(p, t, i, k=3), dynamic=True, backend=BACKEND
    )
    gen = torch.Generator().manual_seed(2)
    for n, queries in ((12, 3), (30, 5)):
        batch = rows(gen, n, queries)
        got, expected = call(*batch), retrieval_ndcg(*batch, k=3)
        torch.testing.assert_close(got, expected)


def test_compiled_catalog_ndcg_at_two_catalog_sizes_equals_eager() -> None:
    """Several item chunks (32 items each) at both sizes; graph breaks allowed."""
    torch._dynamo.reset()

    def score(queries: torch.Tensor, items: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        return catalog_ndcg(queries, items, relevant, k=[1, 10], chunk_size=32)

    call = torch.compile(score, backend=BACKEND)
    gen = torch.Generator().manual_seed(3)
    for n_items in (70, 130):
        queries = torch.randn(5, 4, generator=gen)
        items = torch.randn(n_items, 4, generator=gen)
        # Each user's relevant items: three of its ten best and its three worst.
        scores = queries @ items.T
        best = scores.topk(10, dim=1).indices[:, [0, 4, 9]]
        relevant = torch.cat([best, (-scores).topk(3, dim=1).indices], dim=1)
        got, expected = call(queries, items, relevant), score(queries, items, relevant)
        torch.testing.assert_close(got, expected)
        assert (expected[:, 1] > 0).all()


# --- compiled losses on bad input ---------------------------------------------------------------

LOSSES: dict[str, Callable[[], torch.nn.Module]] = {
    "LambdaRankLoss": lambda: LambdaRankLoss(k=3),
    "ApproxNDCGLoss": lambda: ApproxNDCGLoss(),
    "NeuralNDCGLoss": lambda: NeuralNDCGLoss(max_iter=2),
    "UnbiasedLambdaRankLoss": lambda: UnbiasedLambdaRankLoss(num_positions=6),
}


def bad_input(loss: str, case: str) -> tuple[Any, ...]:
    """The loss's arguments with one NaN score or one negative label (a click of -1)."""
    gen = torch.Generator().manual_seed(4)
    preds, target = lists(gen, 3, 6)
    preds = preds + torch.rand(3, 6, generator=gen)
    if case == "NaN score":
        preds[1, 2] = float("nan")
    else:
        target[0, 1] = -2
    if loss != "UnbiasedLambdaRankLoss":
        return preds, target
    positions = torch.stack([torch.randperm(6, generator=gen) for _ in range(3)])
    clicks = (target > 1).float()
    if case == "negative label":
        clicks[0, 1] = -1.0
    return preds, clicks, positions


@needs_torch_2_13_to_compile_losses
@pytest.mark.parametrize(
    ("loss", "case"),
    [(loss, case) for loss in LOSSES for case in ("NaN score", "negative label")],
)
def test_compiled_loss_raises_eagers_message(loss: str, case: str) -> None:
    """Eager: ``ValueError("Expected ..., but found <the value>.")``; compiled: a
    ``RuntimeError`` from the device-side assertion with the same expectation."""
    torch._dynamo.reset()
    args = bad_input(loss, case)
    with pytest.raises(ValueError, match="Expected") as eager:
        LOSSES[loss]()(*args)
    expectation = str(eager.value).split(", but found")[0]
    compiled = torch.compile(LOSSES[loss](), backend=BACKEND)
    with pytest.raises(RuntimeError) as raised:
        compiled(*args)
    assert re.match(re.escape(expectation), str(raised.value)), (str(eager.value), raised.value)
