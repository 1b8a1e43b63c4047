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

``--baseline REF`` measures a git commit by the same method in the same run: two child
processes run this script's steps, one with ``PYTHONPATH`` set to a temporary ``git worktree``
of ``REF``, one with this checkout's package; each timed batch of calls of the one is followed
by the same batch of the other (so a change of the machine's load falls on both), and the
``after / before`` ratio of the medians is printed per row.
``--baseline "$(git rev-list -1 --before=2026-11-22T19:55:07Z HEAD)"`` compares with the
library of 2026-11-22, before its checked configurations.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


def launches_kernel(func: Any) -> bool:
    """Whether an ATen operation computes (not a view or alias of an input).

    Here, not in ``bench_launches.py`` (which uses it too): ``--baseline`` imports this script
    with an older package, which lacks names that ``bench_launches.py`` imports.
    """
    returns = func._schema.returns
    return not any(r.alias_info is not None and not r.alias_info.is_write for r in returns)


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


def all_steps() -> list[tuple[str, str, Callable[[], object]]]:
    """Every row: ``(call, shape, step)``."""
    return [
        (name, f"{shape[0]}x{shape[1]}", step)
        for shape in SHAPES
        for name, step in steps(shape).items()
    ]


ROOT = Path(__file__).resolve().parent.parent


def serve() -> None:
    """Child of ``--baseline``: print each row's counts, then time the batches asked for.

    Reads lines ``"<row> <calls>"`` (row -1: the tiny op) and answers each with the time of one
    call in microseconds, over one batch of ``calls`` calls.
    """
    torch.set_num_threads(1)
    rows = all_steps()
    x, y = torch.ones(1), torch.ones(1)
    tiny: Callable[[], object] = lambda: torch.add(x, y)  # noqa: E731
    for _, _, step in rows:
        step()  # tables built and kept: the counts are those of every later call
    print(
        json.dumps([[name, shape, launched_ops(st), python_calls(st)] for name, shape, st in rows])
    )
    sys.stdout.flush()
    for line in sys.stdin:
        index, calls = (int(word) for word in line.split())
        step = tiny if index < 0 else rows[index][2]
        for _ in range(3 if calls > 1 else 0):  # warm
            step()
        start = time.perf_counter()
        for _ in range(calls):
            step()
        print((time.perf_counter() - start) / calls * 1e6)
        sys.stdout.flush()


class _Child:
    """A `serve` process importing ``torch_ndcg`` from ``package_root``."""

    def __init__(self, package_root: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(package_root)}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self.rows: list[list[Any]] = json.loads(self.stdout.readline())

    def time_us(self, index: int, calls: int) -> float:
        self.stdin.write(f"{index} {calls}\n")
        self.stdin.flush()
        return float(self.stdout.readline())

    def close(self) -> None:
        self.stdin.close()
        self.process.wait()


def compare(ref: str, timing: dict[str, Any]) -> None:
    """Time ``ref`` and this checkout batch by batch, alternating, and print their ratios."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        git = ["git", "-C", str(ROOT), "worktree"]
        subprocess.run([*git, "add", "--detach", "-q", str(tree), ref], check=True)
        try:
            before, after = _Child(tree), _Child(ROOT)
            timing["rows"] = [
                index
                for index, (name, shape, _, _) in enumerate(after.rows)
                if timing["only"] is None or timing["only"] in f"{name} {shape}"
            ]
            try:
                medians = _alternate(before, after, timing)
            finally:
                before.close()
                after.close()
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], check=True)
    (tiny_before, tiny_after), *rows = medians
    old_rows = [before.rows[index] for index in timing["rows"]]
    new_rows = [after.rows[index] for index in timing["rows"]]
    print(
        f"torch {torch.__version__}, CPU, 1 thread; before = {ref}, after = this checkout, timed "
        f"in two processes batch by batch in turn (medians of {timing['repeats']} batches each)"
    )
    print(f"one tiny op (1-element add): before {tiny_before:.2f} us, after {tiny_after:.2f} us")
    columns = [("shape", 9), ("before us", 10), ("after us", 9), ("after/before", 13)]
    columns += [("ops", 9), ("py calls", 10), ("x tiny op", 10)]
    header = f"{'call':<26} " + " ".join(f"{name:>{width}}" for name, width in columns)
    print(header)
    print("-" * len(header))
    for (us_before, us), old, new in zip(rows, old_rows, new_rows, strict=True):
        name, shape, ops, calls = new
        ratio = us / (ops * tiny_after)
        print(
            f"{name:<26} {shape:>9} {us_before:>10.1f} {us:>9.1f} {us / us_before:>13.2f} "
            f"{f'{old[2]}>{ops}':>9} {f'{old[3]}>{calls}':>10} {ratio:>10.1f}"
        )


def _alternate(before: _Child, after: _Child, timing: dict[str, Any]) -> list[tuple[float, float]]:
    """Per row (the tiny op first): the median time of both children, their batches in turn."""
    medians = []
    for index in [-1, *timing["rows"]]:
        once = max(after.time_us(index, 1), before.time_us(index, 1), 0.1)
        calls = max(1, int(timing["seconds"] * 1e6 / timing["repeats"] / once))
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(timing["repeats"]):
            times[0].append(before.time_us(index, calls))
            times[1].append(after.time_us(index, calls))
        medians.append((statistics.median(times[0]), statistics.median(times[1])))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="batches of calls per timing")
    parser.add_argument("--seconds", type=float, default=0.5, help="time spent per timing")
    parser.add_argument("--baseline", help="a git ref to measure by the same method, for ratios")
    parser.add_argument("--only", help="with --baseline: the rows whose 'call shape' has this")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    timing: dict[str, Any] = {"repeats": args.repeats, "seconds": args.seconds}
    if args.serve:
        serve()
        return
    if args.baseline:
        compare(args.baseline, {**timing, "only": args.only})
        return
    torch.set_num_threads(1)
    tiny = tiny_op_us(repeats=args.repeats, seconds=args.seconds)
    print(f"torch {torch.__version__}, CPU, 1 thread; one tiny op (1-element add): {tiny:.2f} us")
    columns = ("shape", 10), ("host us", 9), ("ops", 5), ("py calls", 9), ("x tiny op", 10)
    header = f"{'call':<28} " + " ".join(f"{name:>{width}}" for name, width in columns)
    print(header)
    print("-" * len(header))
    for name, shown, step in all_steps():
        step()  # tables built and kept: the counts are those of every later call
        ops, calls = launched_ops(step), python_calls(step)
        seconds = host_us(step, **timing)
        ratio = seconds / (ops * tiny)
        print(f"{name:<28} {shown:>10} {seconds:>9.1f} {ops:>5} {calls:>9} {ratio:>10.1f}")


if __name__ == "__main__":
    main()
