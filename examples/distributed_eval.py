"""Evaluate a ranker across processes: NDCG and RetrievalNDCG synchronised over gloo.

Every process scores its own, uneven share of the 50 test queries of ``examples/data/``
(LightGBM's lambdarank data), with LightGBM's eval convention (exponential gain, first-come
ties, empty lists count 1). ``compute()`` synchronises the metric states (one sum all-reduce
for ``NDCG``; for ``RetrievalNDCG`` the rows exchanged so that each query lands on one rank,
three ``all_to_all_single``, then an all-reduce of an error flag and one of the sums) and every
rank prints the global value, which equals the single-process value on all the data. The rows
of ``RetrievalNDCG`` are cut across ranks in the middle of queries (with 3 or more processes,
the later ranks get no row). With ``ties="first"`` it follows the order of the exchanged rows
(rank 0's first), here the original row order because every rank holds a contiguous slice.

Run: ``torchrun --nproc_per_node=2 examples/distributed_eval.py``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ranking_data import load_split

from torch_ndcg import NDCG, RetrievalNDCG, ndcg

OPTIONS = {"ties": "first", "empty_target_action": "pos"}


def scorer(features: torch.Tensor) -> torch.Tensor:
    """A fixed linear scorer (sum of the first 20 features): any model's scores would do."""
    return features[..., :20].sum(-1)


def _rounded(values: dict[str, torch.Tensor]) -> dict[str, float]:
    return {name: round(value.item(), 4) for name, value in values.items()}


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    split = load_split("test")
    features, labels, mask = split.padded()
    scores = scorer(features)

    # Lists: rank r takes an uneven slice (rank 0 gets the most).
    bounds = torch.linspace(0, 1, world + 1).pow(0.5).mul(labels.shape[0]).round().long()
    mine = slice(int(bounds[rank]), int(bounds[rank + 1]))
    lists = NDCG(k=[1, 5, 10], **OPTIONS)  # type: ignore[arg-type]
    lists.update(scores[mine], labels[mine], mask[mine])

    # Flat rows with query ids: the first rank gets 60 % of the rows, the next the rest, the
    # last rank (with 3+ processes) none; queries are cut in the middle.
    flat_scores, flat_labels = scores[mask], labels[mask]
    ids = torch.from_numpy(split.query_ids()) * 1000 + 17
    cut = int(0.6 * flat_scores.numel())
    row_parts = [slice(0, cut), slice(cut, None)] + [slice(0, 0)] * max(0, world - 2)
    part = row_parts[rank] if world > 1 else slice(None)
    rows = RetrievalNDCG(k=[1, 5, 10], **OPTIONS)  # type: ignore[arg-type]
    if part.stop != 0:
        rows.update(flat_scores[part], flat_labels[part], ids[part])

    synced_lists, synced_rows = lists.compute(), rows.compute()
    for turn in range(world):  # print in rank order
        if turn == rank:
            row_range = f"{part.start}:{'' if part.stop is None else part.stop}"
            print(
                f"rank {rank}/{world}: {mine.stop - mine.start} lists, rows {row_range} -> "
                f"NDCG {_rounded(synced_lists)}, RetrievalNDCG {_rounded(synced_rows)}",
                flush=True,
            )
        dist.barrier()
    if rank == 0:
        single = ndcg(scores, labels, k=[1, 5, 10], mask=mask, **OPTIONS).mean(0)  # type: ignore[arg-type]
        print(f"single process, all 50 queries: {[round(v, 4) for v in single.tolist()]}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
