"""What the dense paths of the pair losses save: a loss step with them and with them switched off.

A batch of at most ``DENSE_PAIR_ELEMENTS`` pairs (``N L^2``) takes whole ``[N, L, L]`` tensors
and one autograd Function with a hand-derived gradient (`torch_ndcg._pairwise`'s
``DensePairwiseLogistic`` and ``DenseApproxNDCG``); switched off (the threshold patched to 0),
the same batch takes the blockwise Functions, which give the same numbers to rounding (asserted
here). A fast path stays only where it saves at least 1.2x at a realistic size (shared/DESIGN.md,
rule 3). For each batch this script times one loss step (forward and backward of the module with
its defaults) with the path taken and with it switched off, in turns in one process, best of
``--repeats``, and prints the ratio ``off / on``: at ``[8, 10]`` (bench_host's small batch) and
at the largest batches the paths take (``[8, 64]``, ``[32, 32]``, ``[128, 16]``: 32,768 pairs).

Run: ``python benchmarks/bench_loss_paths.py`` (one thread). The switch patches a private name
of the package: this script pins internals, the tests do not.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from unittest import mock

import torch
from bench_paths import compare  # this script's folder is on sys.path when it is run

from torch_ndcg import ApproxNDCGLoss, LambdaRankLoss, _pairwise

SHAPES = [(8, 10), (8, 64), (32, 32), (128, 16)]


@contextlib.contextmanager
def switched_off() -> Iterator[None]:
    """The pair losses with their dense paths switched off: every batch blockwise."""
    with mock.patch.object(_pairwise, "DENSE_PAIR_ELEMENTS", 0):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    print("| loss | batch | on (ms) | off (ms) | saving (off / on) |")
    print("|---|---|---|---|---|")
    torch.set_num_threads(1)
    for shape in SHAPES:
        assert _pairwise.dense_pairs_fit(*shape)
        batch = torch.randn(shape, generator=gen), torch.randint(0, 5, shape, generator=gen)
        for loss in (LambdaRankLoss(), ApproxNDCGLoss()):

            def step(
                loss: torch.nn.Module = loss,
                preds: torch.Tensor = batch[0],
                target: torch.Tensor = batch[1],
            ) -> tuple[torch.Tensor, ...]:
                leaf = preds.detach().requires_grad_()
                value = loss(leaf, target)
                value.backward()
                return value.detach(), leaf.grad

            on, off = compare(switched_off, step, args.repeats, inner=20, rtol=1e-5, atol=1e-6)
            name, size = type(loss).__name__, f"[{shape[0]}, {shape[1]}]"
            print(f"| {name} | {size} | {on:.3f} | {off:.3f} | {off / on:.2f}x |")


if __name__ == "__main__":
    main()
