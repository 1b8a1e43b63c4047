"""Full-catalog nDCG@10: `catalog_ndcg` against the scores alone, RecBole's pattern, dense `ndcg`.

1,000 users x 1,000,000 items x 64 dims (float32), 10 relevant items per user with grades 1-3,
50 excluded ("seen") items per user, nDCG@10. Arms, each in a fresh process (peak = growth of
Linux ``VmHWM`` over the process's size once the embeddings exist; on CUDA
``torch.cuda.max_memory_allocated`` beyond the embeddings):

(a) floor: the scores alone, ``queries @ items.T`` block by block, at a few user-block x
    item-chunk shapes; the fastest is the floor;
(b) RecBole's full-sort pattern: per batch of 256 users the dense ``[256, N]`` scores, seen items
    set to ``-inf``, ``topk(10)``, hits gathered from a dense ``[256, N]`` positive matrix;
(c) the dense-target `ndcg` on the whole ``[B, N]`` scores and target (at 100 users: 1,000
    users do not fit in memory beside the other arms; labelled);
(d) `catalog_ndcg` (same values as (c) on the same data: asserted at 100 users);
(e) 4 gloo ranks each holding a quarter of the items (``item_offset``, ``process_group``):
    per-rank peak (including its shard of the embeddings) and time, against one process
    holding the whole catalog (peak including all the embeddings).
Also (d) against the floor's blocking in turns in one process (the median of the rounds'
ratios: on a shared machine the separate processes of (a) and (d) may meet different loads),
and the sparse-target `ndcg` of 100 x 1,000,000 scores against one ``topk(10)`` of them; and
the dense-target `ndcg` of 256 x 100,000 scores against one ``topk(10)`` of them, both tie
rules, in turns in one process (``--dense-long-only`` runs this alone); and tied scores, 50
users x 200,000 items whose user embeddings are zero (every score 0: a cold start), by
`catalog_ndcg` and the sparse-target `ndcg` against the score product and one ``topk(10)``, in
turns (``--tied-only`` runs this alone).

Times are medians of ``--repeats`` runs, one CPU thread by default (``--threads``), as the
issue's table. Ratios are printed against the floor and RecBole's pattern measured in the same
run.

Run: ``python benchmarks/bench_catalog.py`` (``--items 100000`` for a quick run; ``--device
cuda`` for a GPU, where arm (e) is skipped).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _memory import peak_rss_kib, reset_peak_rss

K = 10
DIM = 64
RELEVANT = 10
SEEN = 50
ITEM_BLOCK = 50_000  # embeddings are drawn in blocks of this many items, one seed each


def embeddings(users: int, items: int, first: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and the items ``first .. first + items - 1`` of a fixed catalog."""
    queries = torch.randn(users, DIM, generator=torch.Generator().manual_seed(0))
    parts = []
    for block in range(first // ITEM_BLOCK, -(-(first + items) // ITEM_BLOCK)):
        gen = torch.Generator().manual_seed(1000 + block)
        part = torch.randn(ITEM_BLOCK, DIM, generator=gen)
        low = max(first - block * ITEM_BLOCK, 0)
        high = min(first + items - block * ITEM_BLOCK, ITEM_BLOCK)
        parts.append(part[low:high])
    return queries, torch.cat(parts) if parts else torch.empty(0, DIM)


def interactions(users: int, n_items: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Relevant ids, their grades 1-3, and seen ids: all distinct per user."""
    gen = torch.Generator().manual_seed(1)
    start = torch.randint(0, n_items, (users, 1), generator=gen)
    steps = torch.arange(RELEVANT + SEEN) * (n_items // (RELEVANT + SEEN))
    ids = (start + steps) % n_items
    grades = torch.randint(1, 4, (users, RELEVANT), generator=gen).float()
    return ids[:, :RELEVANT], grades, ids[:, RELEVANT:]


def sparse_target(relevant: torch.Tensor, grades: torch.Tensor, n_items: int) -> torch.Tensor:
    """The relevant items as a sparse COO ``[B, N]`` tensor of grades."""
    rows = torch.arange(relevant.shape[0])[:, None].expand_as(relevant)
    indices = torch.stack([rows.reshape(-1), relevant.reshape(-1)])
    return torch.sparse_coo_tensor(indices, grades.reshape(-1), (relevant.shape[0], n_items))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(run: Callable[[], Any], repeats: int, device: torch.device) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        out = run()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def floor_blocks(queries: torch.Tensor, items: torch.Tensor, users: int, chunk: int) -> None:
    out = queries.new_empty((users, chunk))
    for first in range(0, queries.shape[0], users):
        block = queries[first : first + users]
        for start in range(0, items.shape[0], chunk):
            part = items[start : start + chunk]
            torch.mm(block, part.T, out=out[: block.shape[0], : part.shape[0]])


def recbole_pattern(
    queries: torch.Tensor, items: torch.Tensor, relevant: torch.Tensor, seen: torch.Tensor
) -> torch.Tensor:
    """RecBole's full-sort evaluation, written from its description (binary hits)."""
    batch, values = 256, []
    positions = torch.arange(1, K + 1, dtype=torch.float64, device=queries.device)
    discount = 1.0 / torch.log2(positions + 1)
    for first in range(0, queries.shape[0], batch):
        rows = slice(first, first + batch)
        scores = queries[rows] @ items.T
        scores.scatter_(1, seen[rows], float("-inf"))
        top = scores.topk(K, dim=1).indices
        positive = torch.zeros_like(scores, dtype=torch.int32)
        positive.scatter_(1, relevant[rows], 1)
        hits = positive.gather(1, top).double()
        ideal = discount.cumsum(0)[positive.sum(1).clamp(max=K) - 1]
        values.append((hits * discount).sum(1) / ideal)
    return torch.cat(values)


def arm(name: str, users: int, n_items: int, repeats: int, device: torch.device) -> dict[str, Any]:
    """One arm in this (fresh) process: time and peak beyond the embeddings."""
    from torch_ndcg import catalog_ndcg, ndcg

    queries, items = embeddings(users, n_items)
    relevant, grades, seen = interactions(users, n_items)
    queries, items, relevant, grades, seen = (
        t.to(device) for t in (queries, items, relevant, grades, seen)
    )
    result: dict[str, Any] = {"arm": name, "users": users, "items": n_items}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        base = reset_peak_rss()
    if name.startswith("floor"):
        block_users, chunk = (int(v) for v in name.split(":")[1].split("x"))
        result["time"], _ = _timed(
            lambda: floor_blocks(queries, items, block_users, chunk), repeats, device
        )
    elif name == "recbole":
        result["time"], _ = _timed(
            lambda: recbole_pattern(queries, items, relevant, seen), repeats, device
        )
    elif name == "catalog":
        target = sparse_target(relevant, grades, n_items)
        result["time"], values = _timed(
            lambda: catalog_ndcg(queries, items, target, k=K, exclude=seen), repeats, device
        )
        result["values"] = values.tolist()
    elif name == "dense":
        scores = queries @ items.T
        target = torch.zeros_like(scores)
        target.scatter_(1, relevant, grades)
        mask = torch.ones_like(scores, dtype=torch.bool).scatter_(1, seen, False)
        if device.type == "cpu":
            base = reset_peak_rss()
        result["time"], values = _timed(
            lambda: ndcg(scores, target, k=K, mask=mask), repeats, device
        )
        result["values"] = values.tolist()
    elif name.startswith("interleaved"):
        # The floor's blocking and `catalog_ndcg` in turns in one process: the ratio of each
        # round, whose two runs share the machine's load of that moment.
        block_users, chunk = (int(v) for v in name.split(":")[1].split("x"))
        target = sparse_target(relevant, grades, n_items)
        ratios, floors, ours = [], [], []
        for _ in range(repeats):
            floor_time = _timed(
                lambda: floor_blocks(queries, items, block_users, chunk), 1, device
            )[0]
            our_time = _timed(
                lambda: catalog_ndcg(queries, items, target, k=K, exclude=seen), 1, device
            )[0]
            floors.append(floor_time)
            ours.append(our_time)
            ratios.append(our_time / floor_time)
        result["time"] = statistics.median(ours)
        result["floor"] = statistics.median(floors)
        result["ratio"] = statistics.median(ratios)
    elif name == "dense-long":
        # Dense-target `ndcg` and one topk(10) of the same [B, N] scores in turns, both tie
        # rules: the median of each round's ratio (the runs of a round share its load).
        scores = queries @ items.T
        target = torch.zeros_like(scores).scatter_(1, relevant, grades)
        sparse = sparse_target(relevant, grades, n_items)
        ratios: dict[str, list[float]] = {"average": [], "first": []}
        times: dict[str, list[float]] = {"average": [], "first": [], "topk": []}
        for _ in range(repeats):
            topk_time = _timed(lambda: scores.topk(K, dim=1), 1, device)[0]
            times["topk"].append(topk_time)
            for ties in ratios:
                run_time, values = _timed(
                    lambda ties=ties: ndcg(scores, target, k=K, ties=ties), 1, device
                )
                times[ties].append(run_time)
                ratios[ties].append(run_time / topk_time)
                # The same values as the sparse-target path on the same data.
                assert torch.allclose(values, ndcg(scores, sparse, k=K, ties=ties), atol=1e-6)
        result["time"] = statistics.median(times["average"])
        result["times"] = {name: statistics.median(v) for name, v in times.items()}
        result["ratios"] = {ties: statistics.median(v) for ties, v in ratios.items()}
    elif name == "tied":
        # Every score 0 (zero user embeddings): `catalog_ndcg` and the sparse-target `ndcg`
        # against the product and one topk(10), in turns, both tie rules.
        queries = torch.zeros_like(queries)
        target = sparse_target(relevant, grades, n_items)
        ratios = {f"{arm} {ties}": [] for arm in ("catalog", "sparse") for ties in TIES}
        for _ in range(repeats):
            floor_time = _timed(lambda: (queries @ items.T).topk(K, dim=1), 1, device)[0]
            for ties in TIES:
                catalog_time, values = _timed(
                    lambda ties=ties: catalog_ndcg(queries, items, target, k=K, ties=ties),
                    1,
                    device,
                )
                scores = queries @ items.T
                sparse_time, sparse_values = _timed(
                    lambda ties=ties, scores=scores: ndcg(scores, target, k=K, ties=ties),
                    1,
                    device,
                )
                ratios[f"catalog {ties}"].append(catalog_time / floor_time)
                ratios[f"sparse {ties}"].append(sparse_time / floor_time)
                assert torch.allclose(values, sparse_values, atol=1e-6)
        result["time"] = floor_time
        result["ratios"] = {arm: statistics.median(v) for arm, v in ratios.items()}
    elif name in ("sparse-ndcg", "topk"):
        scores = queries @ items.T
        target = sparse_target(relevant, grades, n_items)
        if device.type == "cpu":
            base = reset_peak_rss()
        run = (
            (lambda: scores.topk(K, dim=1))
            if name == "topk"
            else (lambda: ndcg(scores, target, k=K, exclude=seen))
        )
        result["time"], _ = _timed(run, repeats, device)
    if device.type == "cuda":
        result["peak_mib"] = (torch.cuda.max_memory_allocated(device) - base) / 2**20
    else:
        result["peak_mib"] = (peak_rss_kib() - base) / 1024
    return result


def _shard_worker(rank: int, world: int, port: int, users: int, n_items: int, out: str) -> None:
    """Arm (e): one rank of the item-sharded catalog (peak includes its shard)."""
    import torch.distributed as dist

    from torch_ndcg import catalog_ndcg

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600)
    )
    share = n_items // world
    first = rank * share
    size = n_items - first if rank == world - 1 else share
    base = reset_peak_rss()
    queries, items = embeddings(users, size, first)
    relevant, grades, seen = interactions(users, n_items)
    target = sparse_target(relevant, grades, n_items)
    dist.barrier()
    start = time.perf_counter()
    values = catalog_ndcg(
        queries, items, target, k=K, exclude=seen, item_offset=first, process_group="default"
    )
    elapsed = time.perf_counter() - start
    result = {
        "time": elapsed,
        "peak_mib": (peak_rss_kib() - base) / 1024,
        "values": values.tolist(),
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def whole_catalog(users: int, n_items: int) -> dict[str, Any]:
    """One process holding the whole catalog (peak includes all the embeddings)."""
    from torch_ndcg import catalog_ndcg

    base = reset_peak_rss()
    queries, items = embeddings(users, n_items)
    relevant, grades, seen = interactions(users, n_items)
    target = sparse_target(relevant, grades, n_items)
    start = time.perf_counter()
    values = catalog_ndcg(queries, items, target, k=K, exclude=seen)
    elapsed = time.perf_counter() - start
    return {"time": elapsed, "peak_mib": (peak_rss_kib() - base) / 1024, "values": values.tolist()}


def _fresh(args: list[str], threads: int) -> dict[str, Any]:
    """Run this script with ``args`` in a fresh process; its last line is a JSON result."""
    command = [sys.executable, __file__, "--threads", str(threads), *args]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# Users x items of the dense-target arm against one topk (the long-row case).
DENSE_LONG = (256, 100_000)
# Users x items of the tied-scores arm, and the tie rules it runs.
TIED = (50, 200_000)
TIES = ("average", "first")


def _print_tied(repeats: int, device: str, threads: int) -> None:
    """`catalog_ndcg` and sparse-target `ndcg` of ``TIED`` scores all 0, against product + topk."""
    users, n_items = TIED
    rounds = ["--items", str(n_items), "--repeats", str(max(repeats, 5)), "--device", device]
    result = _fresh([*rounds, "--arm", f"tied@{users}"], threads)
    shown = ", ".join(f"{arm} {ratio:.2f}x" for arm, ratio in result["ratios"].items())
    print(
        f"tied scores (zero user embeddings), {users} x {n_items:,}, k={K}: against the score "
        f"product and one topk({K}), median of {max(repeats, 5)} rounds' ratios: {shown}"
    )


def _print_dense_long(repeats: int, device: str, threads: int) -> None:
    """Dense-target `ndcg` of ``DENSE_LONG`` scores against one ``topk(10)``, both tie rules."""
    users, n_items = DENSE_LONG
    rounds = ["--items", str(n_items), "--repeats", str(max(repeats, 5)), "--device", device]
    result = _fresh([*rounds, "--arm", f"dense-long@{users}"], threads)
    times, ratios = result["times"], result["ratios"]
    print(
        f"dense-target `ndcg` of {users} x {n_items:,} scores (k={K}, validate_args=True), in "
        f"turns with one topk({K}) ({times['topk']:.4f} s), median of {max(repeats, 5)} rounds' "
        f"ratios: ties='average' {ratios['average']:.2f}x ({times['average']:.4f} s), "
        f"ties='first' {ratios['first']:.2f}x ({times['first']:.4f} s); peak "
        f"{result['peak_mib']:.0f} MiB beyond the embeddings (scores and target included)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--dense-users", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument(
        "--dense-long-only",
        action="store_true",
        help=f"only dense-target ndcg of {DENSE_LONG[0]} x {DENSE_LONG[1]:,} against one topk",
    )
    parser.add_argument(
        "--tied-only",
        action="store_true",
        help=f"only the tied scores of {TIED[0]} x {TIED[1]:,} against the product and topk",
    )
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    device = torch.device(options.device)
    if options.arm:
        name, users = options.arm.rsplit("@", 1)
        print(json.dumps(arm(name, int(users), options.items, options.repeats, device)))
        return
    if options.dense_long_only:
        _print_dense_long(options.repeats, options.device, options.threads)
        return
    if options.tied_only:
        _print_tied(options.repeats, options.device, options.threads)
        return
    if options.worker == "whole":
        print(json.dumps(whole_catalog(options.users, options.items)))
        return
    if options.worker:
        rank, world, port, out = options.worker.split(",")
        _shard_worker(int(rank), int(world), int(port), options.users, options.items, out)
        return
    users, dense_users = options.users, options.dense_users
    common = ["--items", str(options.items), "--repeats", str(options.repeats)]
    common += ["--device", options.device]
    print(
        f"{users} users x {options.items:,} items x {DIM} dims, nDCG@{K}, {RELEVANT} relevant "
        f"and {SEEN} excluded items per user; {options.threads} thread(s), "
        f"median of {options.repeats}"
    )
    floors = {}
    for shape in ("125x8192", "250x16384", "256x2048", "1000x2048", "1000x4096"):
        floors[shape] = _fresh([*common, "--arm", f"floor:{shape}@{users}"], options.threads)
    best = min(floors, key=lambda shape: floors[shape]["time"])
    floor = floors[best]
    recbole = _fresh([*common, "--arm", f"recbole@{users}"], options.threads)
    ours = _fresh([*common, "--arm", f"catalog@{users}"], options.threads)
    dense = _fresh([*common, "--arm", f"dense@{dense_users}"], options.threads)
    ours_small = _fresh([*common, "--arm", f"catalog@{dense_users}"], options.threads)
    assert torch.allclose(
        torch.tensor(dense["values"]), torch.tensor(ours_small["values"]), atol=1e-5
    )
    header = (
        "| arm | users | time (s) | peak beyond embeddings (MiB) | time / floor | time / RecBole |"
    )
    print("\n" + header)
    print("|---|---|---|---|---|---|")

    def row(label: str, result: dict[str, Any]) -> None:
        ratio_floor = result["time"] / floor["time"] if result["users"] == users else float("nan")
        ratio_recbole = (
            result["time"] / recbole["time"] if result["users"] == users else float("nan")
        )
        print(
            f"| {label} | {result['users']} | {result['time']:.3f} | {result['peak_mib']:.0f} | "
            f"{ratio_floor:.2f} | {ratio_recbole:.2f} |"
        )

    for shape, result in floors.items():
        row(f"(a) scores alone, blocks {shape}{' (floor)' if shape == best else ''}", result)
    row("(b) RecBole pattern (batches of 256 users)", recbole)
    row(f"(c) dense-target `ndcg` (at {dense_users} users)", dense)
    row(f"(d) `catalog_ndcg` at {dense_users} users", ours_small)
    row("(d) `catalog_ndcg`", ours)
    print(
        f"\n(d) / (a): {ours['time'] / floor['time']:.2f}x the floor; "
        f"{ours['time'] / recbole['time']:.2f}x RecBole's pattern; peak {ours['peak_mib']:.0f} MiB "
        f"(RecBole {recbole['peak_mib']:.0f} MiB; dense `ndcg` {dense['peak_mib']:.0f} MiB at "
        f"{dense_users} users)"
    )
    rounds = ["--repeats", str(max(options.repeats, 5)), "--device", options.device]
    interleaved = ["--arm", f"interleaved:{best}@{users}"]
    turns = _fresh(["--items", str(options.items), *rounds, *interleaved], options.threads)
    print(
        f"interleaved in one process ({max(options.repeats, 5)} rounds of the floor's blocking "
        f"{best}, then `catalog_ndcg`): median ratio {turns['ratio']:.2f}x "
        f"({turns['time']:.3f} s / {turns['floor']:.3f} s)"
    )
    sparse = _fresh([*common, "--arm", f"sparse-ndcg@{dense_users}"], options.threads)
    topk = _fresh([*common, "--arm", f"topk@{dense_users}"], options.threads)
    print(
        f"sparse-target `ndcg` of {dense_users} x {options.items:,} scores: "
        f"{sparse['time']:.3f} s = {sparse['time'] / topk['time']:.2f}x one topk({K}) "
        f"({topk['time']:.3f} s); peak {sparse['peak_mib']:.0f} MiB"
    )
    _print_dense_long(options.repeats, options.device, options.threads)
    _print_tied(options.repeats, options.device, options.threads)
    if options.device != "cpu":
        return
    world = options.world
    whole = _fresh(
        ["--items", str(options.items), "--users", str(users), "--worker", "whole"], options.threads
    )
    with tempfile.TemporaryDirectory() as out:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--threads",
                    str(options.threads),
                    "--items",
                    str(options.items),
                    "--users",
                    str(users),
                    "--worker",
                    f"{rank},{world},{port},{out}",
                ]
            )
            for rank in range(world)
        ]
        for proc in procs:
            proc.wait()
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]
    for result in ranks:
        assert torch.allclose(
            torch.tensor(result["values"]), torch.tensor(whole["values"]), atol=1e-5
        )
    top_peak = max(r["peak_mib"] for r in ranks)
    top_time = max(r["time"] for r in ranks)
    print(
        f"\n(e) {world} item-sharded gloo ranks: per-rank peak (with its shard) {top_peak:.0f} MiB "
        f"= {top_peak / whole['peak_mib']:.2f}x one process holding the whole catalog "
        f"({whole['peak_mib']:.0f} MiB); slowest rank {top_time:.2f} s vs {whole['time']:.2f} s "
        f"(ranks share this machine's {os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
