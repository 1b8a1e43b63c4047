"""NDCG and RetrievalNDCG against torchmetrics' RetrievalNormalizedDCG, measured in one run.

20,000 queries x 100 items, labels 0-4, k=10, linear gain (torchmetrics' only gain), fed in
batches of 256 queries:

- update+compute time of ``NDCG`` (one list per row) and of ``RetrievalNDCG`` (flat rows,
  shuffled across batches) against torchmetrics on the same rows, in rounds (ratios taken
  within a round; the table shows the median of each time over the rounds and the median of
  the per-round ratios, every round is printed below it); the values are asserted equal;
- memory: bytes held in each metric's state after all updates (the state tensors'
  ``numel * element_size``), and the peak memory of update+compute: each metric runs once in a
  fresh subprocess that first builds the data, returns freed memory to the OS and resets its
  peak resident set size (Linux ``VmHWM``), and reports how far the peak then grows;
- ``RetrievalNDCG.compute()`` on 2,000,000 rows against one ``torch.sort`` of 2,000,000 floats.

On CUDA (``--device cuda``) every metric, torchmetrics' included, runs on the GPU, times are
taken to the end of the queued work, and peak memory is ``torch.cuda.max_memory_allocated``
over what was allocated before update+compute (in this process).

Run: ``python benchmarks/bench_metrics.py`` (``--queries`` to change the size, ``--device cuda``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torchmetrics import Metric
from torchmetrics.retrieval import RetrievalNormalizedDCG

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import peak_rss_kib, reset_peak_rss
from _timing import best_ms, describe

from torch_ndcg import NDCG, RetrievalNDCG

K = 10
ITEMS = 100
BATCH_QUERIES = 256
SORT_ROWS = 2_000_000
ROUNDS = 3
CPU = torch.device("cpu")


def state_bytes(metric: Metric) -> int:
    """Bytes of every tensor in the metric's state (list states summed)."""
    total = 0
    for name in metric._defaults:
        value = getattr(metric, name)
        for tensor in value if isinstance(value, list) else [value]:
            total += tensor.numel() * tensor.element_size()
    return total


def feed_lists(metric: Metric, preds: torch.Tensor, target: torch.Tensor) -> Any:
    for start in range(0, preds.shape[0], BATCH_QUERIES):
        metric.update(preds[start : start + BATCH_QUERIES], target[start : start + BATCH_QUERIES])
    return metric.compute()


def feed_rows(metric: Metric, rows: tuple[torch.Tensor, ...], batch_rows: int) -> Any:
    preds, target, indexes = rows
    for start in range(0, preds.numel(), batch_rows):
        part = slice(start, start + batch_rows)
        metric.update(preds[part], target[part], indexes=indexes[part])
    return metric.compute()


class MetricRun:
    """One timed run: reset ``metric``, feed it all the data with ``feed``, keep the value."""

    def __init__(self, metric: Metric, feed: Callable[[Metric], Any]) -> None:
        self.metric = metric
        self.feed = feed
        self.value: Any = None

    def __call__(self) -> None:
        """Run once (what :func:`best_ms` times)."""
        self.metric.reset()
        self.value = self.feed(self.metric)


def make_data(
    n: int, device: torch.device = CPU
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """Lists ``[n, 100]`` (scores, labels 0-4) and the same rows flat and shuffled, with ids."""
    torch.manual_seed(0)
    preds = torch.rand(n, ITEMS)
    target = torch.randint(0, 5, (n, ITEMS))
    ids = torch.arange(n).repeat_interleave(ITEMS)
    perm = torch.randperm(n * ITEMS)
    rows = (preds.reshape(-1)[perm], target.reshape(-1)[perm], ids[perm])
    return preds.to(device), target.to(device), tuple(row.to(device) for row in rows)


PEAK_METRICS: dict[str, Callable[[], Metric]] = {
    "torchmetrics": lambda: RetrievalNormalizedDCG(top_k=K),
    "NDCG": lambda: NDCG(k=K, gain="linear"),
    "RetrievalNDCG": lambda: RetrievalNDCG(k=K, gain="linear"),
}


def run_once(name: str, data: Any, device: torch.device) -> Any:
    """Update+compute of a fresh metric ``name`` on ``data``."""
    metric = PEAK_METRICS[name]().to(device)
    if name == "NDCG":
        return feed_lists(metric, data[0], data[1])
    return feed_rows(metric, data[2], BATCH_QUERIES * ITEMS)


def cuda_peak_bytes(name: str, data: Any, device: torch.device) -> int:
    """Peak CUDA memory of update+compute above what was allocated before it."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    run_once(name, data, device)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def peak_worker(name: str, n: int) -> None:
    """Run one metric once on fresh data; print the growth of the peak RSS in bytes.

    The memory freed after building the data is handed back to the OS (``malloc_trim``) and the
    peak is reset (``/proc/self/clear_refs``), so the peak measures the metric alone (Linux).
    """
    data = make_data(n)
    before = reset_peak_rss()
    run_once(name, data, CPU)
    print((peak_rss_kib() - before) * 1024)


def peak_bytes(name: str, n: int) -> int:
    """Peak extra memory of ``name``'s update+compute, measured in a fresh process."""
    command = [sys.executable, __file__, "--queries", str(n), "--peak-worker", name]
    return int(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def human(n_bytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024  # type: ignore[assignment]
    raise AssertionError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--peak-worker", choices=list(PEAK_METRICS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.queries
    device = torch.device(args.device)
    if args.peak_worker:
        peak_worker(args.peak_worker, n)
        return
    preds, target, shuffled = make_data(n, device)
    batch_rows = BATCH_QUERIES * ITEMS

    # This machine's speed drifts by up to 1.5x over tens of seconds, so the metrics are timed
    # in rounds, each close in time: torchmetrics once (it takes seconds), then each of ours as
    # the best of 5 runs after 2 warm-up runs. A ratio is taken within a round; the table shows
    # the median of each time and the median of the per-round ratios (which need not be the
    # ratio of the median times).
    theirs = MetricRun(
        RetrievalNormalizedDCG(top_k=K).to(device), lambda m: feed_rows(m, shuffled, batch_rows)
    )
    lists = MetricRun(NDCG(k=K, gain="linear").to(device), lambda m: feed_lists(m, preds, target))
    rows = MetricRun(
        RetrievalNDCG(k=K, gain="linear").to(device), lambda m: feed_rows(m, shuffled, batch_rows)
    )
    rounds = [
        (
            best_ms(theirs, repeats=1, warmup=0 if device.type == "cpu" else 1, device=device),
            best_ms(lists, repeats=5, warmup=2, device=device),
            best_ms(rows, repeats=5, warmup=2, device=device),
        )
        for _ in range(ROUNDS)
    ]
    theirs_ms, lists_ms, rows_ms = (statistics.median(times) for times in zip(*rounds, strict=True))
    lists_ratio = statistics.median(theirs / ours for theirs, ours, _ in rounds)
    rows_ratio = statistics.median(theirs / ours for theirs, _, ours in rounds)
    theirs_bytes, lists_bytes, rows_bytes = (
        state_bytes(run.metric) for run in (theirs, lists, rows)
    )
    torch.testing.assert_close(lists.value, theirs.value, atol=1e-5, rtol=0)
    torch.testing.assert_close(rows.value, theirs.value, atol=1e-5, rtol=0)

    # compute() alone on 2,000,000 stored rows vs one sort of 2,000,000 floats.
    big_queries = SORT_ROWS // ITEMS
    big = RetrievalNDCG(k=K, compute_with_cache=False).to(device)
    big_perm = torch.randperm(SORT_ROWS)
    big.update(
        torch.rand(SORT_ROWS)[big_perm].to(device),
        torch.randint(0, 5, (SORT_ROWS,))[big_perm].to(device),
        torch.arange(big_queries).repeat_interleave(ITEMS)[big_perm].to(device),
    )
    compute_ms = best_ms(big.compute, repeats=5, device=device)
    floats = torch.rand(SORT_ROWS, device=device)
    sort_ms = best_ms(lambda: torch.sort(floats), repeats=5, device=device)

    print(
        f"torch {torch.__version__}, {describe(device)}, {platform.machine()}; "
        f"{n:,} queries x {ITEMS} items, k={K}, batches of {BATCH_QUERIES} queries\n"
    )
    print("| measurement | torch_ndcg | torchmetrics | ratio |")
    print("|---|---:|---:|---:|")
    print(
        f"| `NDCG` update+compute | {lists_ms:.0f} ms | {theirs_ms:.0f} ms | "
        f"**{lists_ratio:.0f}x** faster |"
    )
    print(
        f"| `RetrievalNDCG` update+compute (rows shuffled) | {rows_ms:.0f} ms | "
        f"{theirs_ms:.0f} ms | "
        f"**{rows_ratio:.0f}x** faster |"
    )
    print(
        f"| `NDCG` state after all updates | {human(lists_bytes)} | {human(theirs_bytes)} | "
        f"{theirs_bytes / lists_bytes:,.0f}x smaller |"
    )
    print(
        f"| `RetrievalNDCG` state after all updates | {human(rows_bytes)} | "
        f"{human(theirs_bytes)} | "
        f"{theirs_bytes / rows_bytes:.2f}x smaller |"
    )
    if device.type == "cuda":
        data = (preds, target, shuffled)
        peaks = {name: cuda_peak_bytes(name, data, device) for name in PEAK_METRICS}
    else:
        peaks = {name: peak_bytes(name, n) for name in PEAK_METRICS}
    for name in ("NDCG", "RetrievalNDCG"):
        ratio = peaks["torchmetrics"] / max(peaks[name], 1)
        versus = f"{ratio:.1f}x smaller" if ratio >= 1 else f"{1 / ratio:.1f}x larger"
        print(
            f"| `{name}` peak extra memory of update+compute | {human(peaks[name])} | "
            f"{human(peaks['torchmetrics'])} | {versus} |"
        )
    print(
        f"| `RetrievalNDCG.compute()` on {SORT_ROWS:,} rows vs one `torch.sort` of "
        f"{SORT_ROWS:,} floats "
        f"| {compute_ms:.0f} ms | sort {sort_ms:.0f} ms | **{compute_ms / sort_ms:.2f}x** a sort |"
    )
    print(
        f"\nvalues: NDCG {float(lists.value):.6f}, RetrievalNDCG {float(rows.value):.6f}, "
        f"torchmetrics {float(theirs.value):.6f}"
    )
    by_round = "; ".join(
        f"{theirs:.0f} ms: {theirs / ours_lists:.0f}x, {theirs / ours_rows:.0f}x"
        for theirs, ours_lists, ours_rows in rounds
    )
    print(f"rounds (torchmetrics: NDCG, RetrievalNDCG faster): {by_round}")


if __name__ == "__main__":
    main()
