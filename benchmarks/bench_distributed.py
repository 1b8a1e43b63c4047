"""RetrievalNDCG.compute() under DDP: per-rank peak memory and time for 1, 2 and 4 ranks.

40,000 queries x 100 rows (4,000,000 rows, labels 0-4, k=10), shuffled so that every query's
rows are spread over the ranks; each rank updates the metric with its share of the rows. Then
``compute()`` runs on every rank: the rows are exchanged so that each query lands on one rank,
which scores it, and one all-reduce gives the mean (one more, of an error flag, raises an error
on every rank together). With one rank, one process holds and scores all the rows. Measured
per rank: the growth of the peak resident set size during ``compute()`` (Linux ``VmHWM``, reset
after the updates and after freed memory is returned to the OS) and its time; the table shows
the largest over the ranks and the ratio to one process. The value is asserted equal to one
process's.

Run: ``python benchmarks/bench_distributed.py`` (gloo on the CPU; ``--device cuda`` uses NCCL,
one GPU per rank).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _memory import peak_rss_kib, reset_peak_rss

from torch_ndcg import RetrievalNDCG

ITEMS = 100
K = 10
BATCH_ROWS = 256 * ITEMS


def _rows(queries: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    n = queries * ITEMS
    perm = torch.randperm(n, generator=gen)
    preds = torch.rand(n, generator=gen)[perm]
    target = torch.randint(0, 5, (n,), generator=gen)[perm]
    ids = torch.arange(queries).repeat_interleave(ITEMS)[perm]
    return preds, target, ids


def measure(rank: int, world: int, queries: int, device: str) -> dict[str, float]:
    """Feed this rank's share of the rows, then time and measure ``compute()``."""
    on = torch.device(device if device == "cpu" else f"cuda:{rank}")
    preds, target, ids = _rows(queries)
    share = slice(rank * preds.numel() // world, (rank + 1) * preds.numel() // world)
    preds, target, ids = (t[share].to(on) for t in (preds, target, ids))
    metric = RetrievalNDCG(k=K).to(on)
    for start in range(0, preds.numel(), BATCH_ROWS):
        part = slice(start, start + BATCH_ROWS)
        metric.update(preds[part], target[part], ids[part])
    del preds, target, ids
    if on.type == "cuda":
        torch.cuda.synchronize(on)
        before = torch.cuda.memory_allocated(on)
        torch.cuda.reset_peak_memory_stats(on)
    else:
        before = reset_peak_rss()
    if world > 1:
        dist.barrier()
    start_time = time.perf_counter()
    value = metric.compute()
    if on.type == "cuda":
        torch.cuda.synchronize(on)
    seconds = time.perf_counter() - start_time
    if on.type == "cuda":
        extra = torch.cuda.max_memory_allocated(on) - before
    else:
        extra = (peak_rss_kib() - before) * 1024
    return {"ms": seconds * 1e3, "bytes": float(extra), "value": float(value)}


def _worker(rank: int, world: int, port: int, queries: int, device: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300)
    )
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    result = measure(rank, world, queries, device)
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def run(world: int, queries: int, device: str) -> list[dict[str, float]]:
    """Per-rank results of ``world`` ranks (one process without torch.distributed for 1)."""
    with tempfile.TemporaryDirectory() as out:
        if world == 1:
            return [measure(0, 1, queries, device)]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        mp.start_processes(
            _worker, args=(world, port, queries, device, out), nprocs=world, start_method="spawn"
        )
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=40_000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    results = {world: run(world, args.queries, args.device) for world in args.ranks}
    single = results[args.ranks[0]]
    single_bytes, single_ms = max(r["bytes"] for r in single), max(r["ms"] for r in single)
    print(
        f"torch {torch.__version__}, {args.device} ({'NCCL' if args.device == 'cuda' else 'gloo'}),"
        f" {args.queries:,} queries x {ITEMS} rows, k={K}\n"
    )
    print(
        "| ranks | rows per rank | compute() time, slowest rank | vs 1 | per-rank peak extra "
        "memory, largest | vs 1 |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for world, per_rank in results.items():
        peak = max(r["bytes"] for r in per_rank)
        ms = max(r["ms"] for r in per_rank)
        for r in per_rank:
            assert abs(r["value"] - single[0]["value"]) < 1e-6, (r["value"], single[0]["value"])
        print(
            f"| {world} | {args.queries * ITEMS // world:,} | {ms:.0f} ms | "
            f"{ms / single_ms:.2f}x | {peak / 2**20:.1f} MiB | **{peak / single_bytes:.2f}x** |"
        )
    print(f"\nvalue on every rank: {single[0]['value']:.6f}")


if __name__ == "__main__":
    main()
