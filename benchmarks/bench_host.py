"""Host time per call of the hot paths on small inputs, against the ops they launch.

On an accelerator, an ``update`` or a loss step on small batches is bound by the host: Python
and the dispatch of each operation, not the kernels. This script measures that on the CPU with
one thread, for ``ndcg``, ``NDCG.update``, ``RetrievalNDCG.update`` and each loss's forward +
backward, at ``[8, 10]`` and ``[256, 100]`` (k = 10, ``NDCG`` with ``k=[1, 5, 10]``, default
checks):

- ``host us``: median time of one call (medians of ``--repeats`` batches of calls);
- ``ops``: the tensor operations it launches, counted at the dispatcher as
  ``bench_launches.py`` counts them (an operation that only returns a view does not count);
- ``py calls``: the Python function calls it makes (``sys.setprofile``'s ``call`` events;
  calls into C are not counted);
- ``x tiny op``: the host time over ``ops`` times the median time of one tiny op (a one-element
  ``torch.add``) measured in the same run: 1 would be a call that costs only its launches.

Run: ``python benchmarks/bench_host.py``. The machine's load moves the times (not the counts):
compare runs made one after the other, and repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_launches import launches_kernel

from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    NeuralNDCGLoss,
    RetrievalNDCG,
    ndcg,
)

SHAPES = [(8, 10), (256, 100)]
K = 10


class _OpCounter(TorchDispatchMode):
    """Counts the computing operations dispatched inside it (as ``bench_launches.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        self.launches += launches_kernel(func)
        return func(*args, **(kwargs or {}))


def python_calls(step: Callable[[], object]) -> int:
    """The Python function calls ``step()`` makes."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return calls - 1  # the step itself


def launched_ops(step: Callable[[], object]) -> int:
    """The tensor operations ``step()`` launches."""
    with _OpCounter() as counter:
        step()
    return counter.launches


def host_us(step: Callable[[], object], *, repeats: int, seconds: float) -> float:
    """Median time of one ``step()`` in microseconds: medians of ``repeats`` batches."""
    for _ in range(5):
        step()
    start = time.perf_counter()
    step()
    once = max(time.perf_counter() - start, 1e-7)
    calls = max(1, int(seconds / repeats / once))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times) * 1e6


def steps(shape: tuple[int, int]) -> dict[str, Callable[[], object]]:
    """The hot paths on a batch of ``shape``: each a callable doing one call."""
    gen = torch.Generator().manual_seed(0)
    preds = torch.randn(shape, generator=gen)
    target = torch.randint(0, 5, shape, generator=gen)
    ids = torch.arange(shape[0]).repeat_interleave(shape[1])
    flat_preds, flat_target = preds.reshape(-1), target.reshape(-1)
    metric, retrieval = NDCG(k=[1, 5, 10]), RetrievalNDCG(k=K)

    def retrieval_update() -> None:
        retrieval.update(flat_preds, flat_target, ids)
        retrieval.reset()  # stored rows would otherwise grow over the timing

    out: dict[str, Callable[[], object]] = {
        "ndcg": lambda: ndcg(preds, target, k=K),
        "NDCG.update": lambda: metric.update(preds, target),
        "RetrievalNDCG.update": retrieval_update,
    }
    for loss in (LambdaRankLoss(k=K), ApproxNDCGLoss(k=K), NeuralNDCGLoss(k=K)):

        def step(loss: torch.nn.Module = loss) -> None:
            leaf = preds.detach().requires_grad_()
            loss(leaf, target).backward()

        out[f"{type(loss).__name__} fwd+bwd"] = step
    return out


def tiny_op_us(*, repeats: int, seconds: float) -> float:
    """Median host time of one one-element ``torch.add``, in microseconds."""
    x, y = torch.ones(1), torch.ones(1)
    return host_us(lambda: torch.add(x, y), repeats=repeats, seconds=seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="batches of calls per timing")
    parser.add_argument("--seconds", type=float, default=0.5, help="time spent per timing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    timing = {"repeats": args.repeats, "seconds": args.seconds}
    tiny = tiny_op_us(**timing)
    print(f"torch {torch.__version__}, CPU, 1 thread; one tiny op (1-element add): {tiny:.2f} us")
    columns = ("shape", 10), ("host us", 9), ("ops", 5), ("py calls", 9), ("x tiny op", 10)
    header = f"{'call':<28} " + " ".join(f"{name:>{width}}" for name, width in columns)
    print(header)
    print("-" * len(header))
    for shape in SHAPES:
        for name, step in steps(shape).items():
            ops, calls = launched_ops(step), python_calls(step)
            seconds = host_us(step, **timing)
            ratio = seconds / (ops * tiny)
            shown = f"{shape[0]}x{shape[1]}"
            print(f"{name:<28} {shown:>10} {seconds:>9.1f} {ops:>5} {calls:>9} {ratio:>10.1f}")


if __name__ == "__main__":
    main()
