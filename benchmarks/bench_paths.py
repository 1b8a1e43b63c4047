"""What each fast path of dense lists saves: the same call with the path and with it switched off.

A fast path stays only where it saves at least 1.2x at a realistic size (shared/DESIGN.md,
rule 3), or where it is the only way to hold a speed bar (the ideal DCG from label counts:
less than 1.2x, but without it ``[256, 100]`` calls took 1.14–1.19x of the library before
it, past that bar of 1.1x; the exact gains: 1.04-1.27x, but without them ``SoftmaxLoss``
falls behind allRank's ``listNet`` at 8 x 10 and ``XENDCGLoss`` further behind it at every
size). A small CPU batch padded so that ATen's ``topk`` splits it between two threads went by
this measure (1.14x at ``[256, 100]`` on two threads). For each path this script times one
call with the path taken and with it switched off (the general path then gives the same
numbers to rounding, which the script asserts), in turns in one process, best of
``--repeats``, and prints the ratio ``off / on``:

- ``small batch``: `ndcg` and `NDCG.update` on ``[8, 10]`` (`_dcg_paths.small_ndcg`, taken
  where `_dcg_paths.small_batch` admits the batch);
- ``tie-free skip``: tie-free batches skip the tie averaging, ``[256, 100]``;
- ``label counts``: the ideal DCG of small integer labels from their counts, ``[256, 100]``
  and ``[256, 300]`` (lists of at most 512 items: past that a ``topk`` costs less;
  `torch_ndcg._kernels.ideal_dcg` with ``levels=``, switched by `_dcg_paths.COUNT_LABELS_PAST`);
- ``long rows``: the top of ``[16, 100_000]`` rows from group maxima (`_dcg_paths.long_rows`);
- ``exact gains``: `SoftmaxLoss` and `XENDCGLoss` (forward + backward, noise from one seed) on
  checked integer labels whose gains the scores' dtype holds exactly: the gains in float32 and,
  for XE-NDCG, its target's numerators as ``2^y - gamma`` (`_loss_input.dense_checks`'s third
  value; off: ``None``, the gains in float64).

Run: ``python benchmarks/bench_paths.py`` (one thread). The switches
patch private names of the package: this script pins internals, the tests do not.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from _timing import best_ms  # this script's folder is on sys.path when it is run

from torch_ndcg import NDCG, SoftmaxLoss, XENDCGLoss, _dcg_paths, ndcg
from torch_ndcg.functional import _loss_input

K = 10


@contextlib.contextmanager
def switched_off(path: str) -> Iterator[None]:
    """The package with one fast path switched off."""
    if path == "small batch":
        patch = mock.patch.object(_dcg_paths, "small_batch", return_value=False)
    elif path == "tie-free skip":
        real = _dcg_paths.top_items

        def tied(*args: Any, **kwargs: Any) -> Any:
            top_keys, top_index, flag = real(*args, **kwargs)
            # As if a tie touched the top k: always averaged.
            return top_keys, top_index, None if flag is None else torch.ones((), dtype=torch.bool)

        patch = mock.patch.object(_dcg_paths, "top_items", tied)
    elif path == "label counts":
        patch = mock.patch.object(_dcg_paths, "COUNT_LABELS_PAST", 1 << 62)
    elif path == "long rows":
        patch = mock.patch.object(_dcg_paths, "long_rows", return_value=False)
    elif path == "exact gains":
        checks = _loss_input.dense_checks

        def inexact(*args: Any) -> Any:
            found = checks(*args)
            return None if found is None else (*found[:2], None)

        patch = mock.patch.object(_loss_input, "dense_checks", inexact)
    else:
        raise ValueError(path)
    with patch:
        yield


def compare(
    switch: Callable[[], contextlib.AbstractContextManager[None]],
    call: Callable[[], object],
    repeats: int,
    *,
    inner: int = 5,
    rtol: float = 1e-6,
    atol: float = 1e-7,
) -> tuple[float, float]:
    """Best times (ms) of ``call`` as it is and inside ``switch()``, in turns.

    Asserts first that both give the same numbers to rounding (where ``call`` returns any).
    """
    on_times, off_times = [], []
    expected = call()
    with switch():
        got = call()
    if expected is not None:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)
    for _ in range(repeats):
        on_times.append(best_ms(call, repeats=inner))
        with switch():
            off_times.append(best_ms(call, repeats=inner))
    return min(on_times), min(off_times)


def loss_step(loss: Any, preds: torch.Tensor, target: torch.Tensor) -> Callable[[], object]:
    """One forward + backward of ``loss``, its noise (if any) from one seed: the loss."""
    leaf = preds.requires_grad_()
    noisy = isinstance(loss, XENDCGLoss)

    def step() -> object:
        leaf.grad = None
        seeded = {"generator": torch.Generator().manual_seed(0)} if noisy else {}
        value = loss(leaf, target, **seeded)
        value.backward()
        return value.detach()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)

    def batch(rows: int, items: int, levels: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
        preds = torch.randn(rows, items, generator=gen)
        return preds, torch.randint(0, levels, (rows, items), generator=gen)

    small, medium, wide = batch(8, 10), batch(256, 100), batch(64, 10_000)
    long, longer = batch(16, 100_000), batch(256, 300)
    metric = NDCG(k=[1, 5, 10])

    def update(preds: torch.Tensor, target: torch.Tensor) -> None:
        metric.update(preds, target)

    cases: list[tuple[str, str, Callable[[], object]]] = [
        ("small batch", "ndcg [8, 10]", lambda: ndcg(*small, k=K)),
        ("small batch", "NDCG.update [8, 10]", lambda: update(*small)),
        ("tie-free skip", "ndcg [256, 100]", lambda: ndcg(*medium, k=K)),
        ("tie-free skip", "ndcg [64, 10000]", lambda: ndcg(*wide, k=K)),
        ("label counts", "ndcg [256, 100]", lambda: ndcg(*medium, k=K)),
        ("label counts", "NDCG.update [256, 100]", lambda: update(*medium)),
        ("label counts", "ndcg [256, 300]", lambda: ndcg(*longer, k=K)),
        ("long rows", "ndcg [16, 100000]", lambda: ndcg(*long, k=K)),
    ]
    for loss in (SoftmaxLoss(), XENDCGLoss()):
        for rows, items in ((8, 10), (64, 128), (16, 1_024)):
            step = loss_step(loss, *batch(rows, items))
            cases.append(("exact gains", f"{type(loss).__name__} [{rows}, {items}]", step))
    print("| path | call | on (ms) | off (ms) | saving (off / on) |")
    print("|---|---|---|---|---|")
    torch.set_num_threads(1)
    for path, name, call in cases:
        on, off = compare(lambda path=path: switched_off(path), call, args.repeats)
        print(f"| {path} | {name} | {on:.3f} | {off:.3f} | {off / on:.2f}x |")


if __name__ == "__main__":
    main()
