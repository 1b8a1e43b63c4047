"""Kernel launches per call: ours on an accelerator's paths against torchmetrics and allRank.

At the sizes users validate and train with, a GPU step is bound by its kernel launches (each
costs the host several microseconds, while a [256, 100] batch is microseconds of GPU work), so
the number of operations a call dispatches predicts its GPU time where a GPU cannot be had. This
script counts them on the CPU, at the dispatcher (a ``TorchDispatchMode``): every ATen operation
that does not merely return a view or alias of its input (``Tensor(a)`` without ``!`` in its
schema) counts as one launch. Ours runs on the CPU made to take the accelerator's paths (no value
read back: device-side checks, branch-free ties; pairwise blocks of
``ACCELERATOR_BLOCK_ELEMENTS``), so the count is what a GPU would launch; the peers run as they
run anywhere (their operations do not depend on the device).

Rows, on the data of ``bench_metrics.py`` and ``bench_losses.py``:

- a whole evaluation, ``--queries`` lists of 100 in batches of 256 (every update and the
  compute, k=10, default checks), ``NDCG`` and ``RetrievalNDCG`` against torchmetrics'
  ``RetrievalNormalizedDCG`` (which only stores rows in ``update`` and launches about 55
  operations per query in ``compute``: its count, and the ratio, grow with the queries);
  ours' launches per ``NDCG.update`` of [256, 100] are printed below the table;
- a training step (forward + backward, ``validate_args=False`` as in ``bench_losses.py``) of
  each loss against allRank at 64 x 128 and 16 x 1,024 (skipped without allRank).

Run: ``python benchmarks/bench_launches.py`` (``--allrank-path`` as in ``bench_losses.py``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torchmetrics.retrieval import RetrievalNormalizedDCG

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_losses import import_allrank
from bench_metrics import BATCH_QUERIES, ITEMS, K, feed_lists, feed_rows, make_data

from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    RetrievalNDCG,
    _kernels,
    _pairwise,
    _validation,
)
from torch_ndcg.functional import _ndcg

LOSS_CASES = [(64, 128), (16, 1_024)]


def launches_kernel(func: Any) -> bool:
    """Whether an ATen operation computes (not a view or alias of an input)."""
    returns = func._schema.returns
    return not any(r.alias_info is not None and not r.alias_info.is_write for r in returns)


class LaunchCounter(TorchDispatchMode):
    """Counts the computing operations dispatched inside it, and the largest tensor they made."""

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0
        self.largest_output = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        if launches_kernel(func):
            self.launches += 1
            for tensor in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(tensor, torch.Tensor):
                    self.largest_output = max(self.largest_output, tensor.numel())
        return out


def step_launches(
    loss: Callable[..., torch.Tensor], preds: torch.Tensor, target: torch.Tensor
) -> int:
    """Launches of one forward + backward of ``loss``."""
    return count(lambda: loss(preds, target).backward())


def count(fn: Callable[[], Any]) -> int:
    """Launches of one call of ``fn``, after one uncounted call (caches filled)."""
    fn()
    with LaunchCounter() as counter:
        fn()
    return counter.launches


@contextmanager
def accelerator_paths() -> Iterator[None]:
    """The package on the CPU taking an accelerator's paths (as ``tests/conftest.py`` does)."""
    patches = [
        mock.patch.object(module, "may_read_back", return_value=False)
        for module in (_kernels, _validation, _ndcg)
    ]
    patches.append(
        mock.patch.object(_pairwise, "BLOCK_ELEMENTS", _pairwise.ACCELERATOR_BLOCK_ELEMENTS)
    )
    for patch in patches:
        patch.start()
    try:
        yield
    finally:
        for patch in patches:
            patch.stop()


def row(what: str, ours: int, peer: int | None, peer_name: str) -> None:
    peer_cell = "n/a" if peer is None else f"{peer:,}"
    ratio = "n/a" if peer is None else f"**{peer / ours:.1f}x** fewer"
    print(f"| {what} | {ours:,} | {peer_name} {peer_cell} | {ratio} |")


def metric_rows(queries: int) -> int:
    """The metric rows; returns the launches of one ``NDCG.update``."""
    preds, target, rows = make_data(queries)
    batch_preds, batch_target = preds[:BATCH_QUERIES], target[:BATCH_QUERIES]
    ndcg = NDCG(k=K, gain="linear")
    retrieval = RetrievalNDCG(k=K, gain="linear")
    theirs = RetrievalNormalizedDCG(top_k=K)
    batch_rows = BATCH_QUERIES * ITEMS
    with accelerator_paths():
        ours_update = count(lambda: ndcg.update(batch_preds, batch_target))
        ours_lists = count(lambda: (ndcg.reset(), feed_lists(ndcg, preds, target)))
        ours_rows = count(lambda: (retrieval.reset(), feed_rows(retrieval, rows, batch_rows)))
    their_rows = count(lambda: (theirs.reset(), feed_rows(theirs, rows, batch_rows)))
    row(f"`NDCG`, {queries:,} queries (updates + compute)", ours_lists, their_rows, "torchmetrics")
    row(f"`RetrievalNDCG`, {queries:,} queries", ours_rows, their_rows, "torchmetrics")
    return ours_update


def loss_rows(allrank_path: str) -> None:
    allrank = import_allrank(allrank_path)
    ours = {
        "LambdaRank (NDCG-Loss2++)": LambdaRankLoss(weighting="ndcg2pp", validate_args=False),
        "ApproxNDCG": ApproxNDCGLoss(validate_args=False),
        "NeuralNDCG": NeuralNDCGLoss(validate_args=False),
    }
    theirs: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None] = {
        name: None for name in ours
    }
    if allrank is not None:
        theirs = {
            "LambdaRank (NDCG-Loss2++)": lambda p, t: allrank.lambdaLoss(
                p, t, weighing_scheme="ndcgLoss2PP_scheme"
            ),
            "ApproxNDCG": allrank.approxNDCGLoss,
            "NeuralNDCG": allrank.neuralNDCG,
        }
    for batch, length in LOSS_CASES:
        generator = torch.Generator().manual_seed(0)
        preds = torch.randn(batch, length, generator=generator).requires_grad_()
        target = torch.randint(0, 5, (batch, length), generator=generator).float()
        for name, loss in ours.items():
            with accelerator_paths():
                ours_count = step_launches(loss, preds, target)
            peer = theirs[name]
            peer_count = None if peer is None else step_launches(peer, preds, target)
            row(f"{name} step, {batch} x {length:,}", ours_count, peer_count, "allRank")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--allrank-path", default="/tmp/allrank_site")
    args = parser.parse_args()
    print(f"torch {torch.__version__}; launches = computing ATen ops dispatched per call")
    print()
    print("| call | ours (accelerator paths) | peer | ratio |")
    print("|---|---:|---:|---:|")
    per_update = metric_rows(args.queries)
    loss_rows(args.allrank_path)
    print()
    print(f"ours per `NDCG.update` of [256, 100] (k=10, default checks): {per_update} launches")


if __name__ == "__main__":
    main()
