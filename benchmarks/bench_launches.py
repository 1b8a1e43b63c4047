"""Kernel launches (and memory) per call: ours on an accelerator's paths against the peers.

At the sizes users validate and train with, a GPU step is bound by its kernel launches (each
costs the host several microseconds, while a [256, 100] batch is microseconds of GPU work), so
the number of operations a call dispatches predicts its GPU time where a GPU cannot be had. This
script counts them on the CPU, at the dispatcher (a ``TorchDispatchMode``): every ATen operation
that does not merely return a view or alias of its input (``Tensor(a)`` without ``!`` in its
schema) counts as one launch. Ours runs on the CPU made to take the accelerator's paths (no value
read back: device-side checks, branch-free ties; pairwise blocks of
the accelerator's sizes), so the count is what a GPU would launch; the peers run as they
run anywhere (their operations do not depend on the device).

Rows, on the data of ``bench_metrics.py`` and ``bench_losses.py``:

- a whole evaluation, ``--queries`` lists of 100 in batches of 256 (every update and the
  compute, k=10, default checks), ``NDCG`` and ``RetrievalNDCG`` against torchmetrics'
  ``RetrievalNormalizedDCG`` (which only stores rows in ``update`` and launches about 55
  operations per query in ``compute``: its count, and the ratio, grow with the queries);
  ours' launches per ``NDCG.update`` of [256, 100] are printed below the table;
- a training step (forward + backward, ``validate_args=False`` as in ``bench_losses.py``) of
  each loss against allRank at 64 x 128 and 16 x 1,024 (allRank's columns n/a without it), with
  the peak memory of the tensors it holds at once (see `LaunchCounter`): what
  ``torch.cuda.max_memory_allocated`` reports for the same step on a GPU, so ours is measured on
  the accelerator's block size (allRank's ``approxNDCGLoss`` at 16 x 1,024 comes to 416.7 MiB
  here; 417 MiB was measured on an H100).

Run: ``python benchmarks/bench_launches.py`` (``--allrank-path`` as in ``bench_losses.py``);
``--debiased`` counts instead a training step of ``UnbiasedLambdaRankLoss`` (and in ``eval()``
mode, and an IPS-weighted ``LambdaRankLoss`` step) against a plain ``LambdaRankLoss`` step on
the same clicks at 16 x 1,024.
"""

from __future__ import annotations

import argparse
import sys
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torchmetrics.retrieval import RetrievalNormalizedDCG

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_host import launches_kernel
from bench_losses import import_allrank
from bench_metrics import BATCH_QUERIES, ITEMS, K, feed_lists, feed_rows, make_data

from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    RetrievalNDCG,
    UnbiasedLambdaRankLoss,
    _host,
    _pairwise,
    examination_probability,
    simulate_clicks,
)

LOSS_CASES = [(64, 128), (16, 1_024)]


class LaunchCounter(TorchDispatchMode):
    """Counts the computing operations dispatched inside it, and the memory their outputs hold.

    ``peak_bytes`` is the largest total size of the storages made inside it and alive at once
    (each storage counted once, views included, freed when its last tensor goes): what
    ``torch.cuda.max_memory_allocated`` reports for the same work, less the allocator's rounding
    to 512 bytes and one-off workspaces. ``largest_output`` is the most elements of one output.
    """

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0
        self.largest_output = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self._live: set[int] = set()

    def _freed(self, key: int, size: int) -> None:
        self.live_bytes -= size
        self._live.discard(key)

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._live:
            return
        size = storage.nbytes()
        self._live.add(key)
        self.live_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        # The storage's Python object lives as long as the storage itself (torch keeps it).
        weakref.finalize(storage, self._freed, key, size)

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        computes = launches_kernel(func)
        self.launches += computes
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
                self._track(tensor)
                if computes:
                    self.largest_output = max(self.largest_output, tensor.numel())
        return out


def counted(fn: Callable[[], Any]) -> LaunchCounter:
    """The counter of one call of ``fn``, after one uncounted call (caches filled)."""
    fn()
    with LaunchCounter() as counter:
        fn()
    return counter


def count(fn: Callable[[], Any]) -> int:
    """Launches of one call of ``fn``, after one uncounted call."""
    return counted(fn).launches


def step_counts(
    loss: Callable[..., torch.Tensor], preds: torch.Tensor, target: torch.Tensor
) -> LaunchCounter:
    """The counter of one forward + backward of ``loss``."""
    return counted(lambda: loss(preds, target).backward())


@contextmanager
def accelerator_paths() -> Iterator[None]:
    """The package on the CPU taking an accelerator's paths (as ``tests/conftest.py`` does)."""
    with (
        mock.patch.object(_host, "may_read_back", return_value=False),
        mock.patch.object(_pairwise, "accelerator_blocks", return_value=True),
    ):
        yield


def row(what: str, ours: int, peer: int | None, peer_name: str) -> None:
    peer_cell = "n/a" if peer is None else f"{peer:,}"
    ratio = "n/a" if peer is None else f"**{peer / ours:.1f}x** fewer"
    print(f"| {what} | {ours:,} | {peer_name} {peer_cell} | {ratio} |")


def loss_row(what: str, ours: LaunchCounter, peer: LaunchCounter | None) -> None:
    mib = 2**20
    if peer is None:
        peer_cells = "n/a | n/a"
    else:
        fewer = peer.launches / ours.launches
        memory = ours.peak_bytes / peer.peak_bytes
        peer_cells = (
            f"{peer.launches:,}, {peer.peak_bytes / mib:.1f} MiB | "
            f"**{fewer:.1f}x** fewer launches, **{memory:.2f}x** memory"
        )
    print(f"| {what} | {ours.launches:,}, {ours.peak_bytes / mib:.1f} MiB | {peer_cells} |")


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
    print(
        "| loss step (forward + backward) | ours: launches, peak memory | allRank 1.4.3 | ratio |"
    )
    print("|---|---:|---:|---:|")
    for batch, length in LOSS_CASES:
        generator = torch.Generator().manual_seed(0)
        preds = torch.randn(batch, length, generator=generator).requires_grad_()
        target = torch.randint(0, 5, (batch, length), generator=generator).float()
        for name, loss in ours.items():
            with accelerator_paths():
                ours_counts = step_counts(loss, preds, target)
            peer = theirs[name]
            peer_counts = None if peer is None else step_counts(peer, preds, target)
            loss_row(f"{name}, {batch} x {length:,}", ours_counts, peer_counts)


def debiased_rows() -> None:
    """Launches of debiased and IPS LambdaRank steps against a plain one on the same clicks."""
    print("| step (forward + backward), 16 x 1,024 clicks | launches | against plain |")
    print("|---|---:|---:|")
    batch, length = LOSS_CASES[-1]
    generator = torch.Generator().manual_seed(0)
    preds = torch.randn(batch, length, generator=generator).requires_grad_()
    positions = torch.stack([torch.randperm(length, generator=generator) for _ in range(batch)])
    labels = torch.randint(0, 5, (batch, length), generator=generator)
    clicks = simulate_clicks(labels, positions, generator=generator)
    shown = positions >= 0
    weight = 1 / examination_probability(positions)
    plain = LambdaRankLoss(validate_args=False)
    unbiased = UnbiasedLambdaRankLoss(num_positions=length, validate_args=False)
    frozen = UnbiasedLambdaRankLoss(num_positions=length, validate_args=False).eval()
    steps = {
        "plain `LambdaRankLoss` (mask of the shown items)": lambda: plain(preds, clicks, shown),
        "`UnbiasedLambdaRankLoss`, training (biases updated)": lambda: unbiased(
            preds, clicks, positions
        ),
        "`UnbiasedLambdaRankLoss`, `eval()` (biases frozen)": lambda: frozen(
            preds, clicks, positions
        ),
        "`LambdaRankLoss`, IPS `weight=`": lambda: plain(preds, clicks, shown, weight=weight),
    }
    base = None
    for name, step in steps.items():
        with accelerator_paths():
            launches = count(lambda step=step: step().backward())
        base = base or launches
        print(f"| {name} | {launches} | {launches / base:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--allrank-path", default="/tmp/allrank_site")
    parser.add_argument("--debiased", action="store_true", help="debiased steps against plain")
    args = parser.parse_args()
    if args.debiased:
        debiased_rows()
        return
    print(f"torch {torch.__version__}; launches = computing ATen ops dispatched per call")
    print()
    print("| call | ours (accelerator paths) | peer | ratio |")
    print("|---|---:|---:|---:|")
    per_update = metric_rows(args.queries)
    print()
    print(f"ours per `NDCG.update` of [256, 100] (k=10, default checks): {per_update} launches")
    print()
    loss_rows(args.allrank_path)


if __name__ == "__main__":
    main()
