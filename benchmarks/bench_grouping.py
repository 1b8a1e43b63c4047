"""``pad_by_query`` against the floor of one stable ``argsort`` of the query ids.

1,000,000 flat rows of 10,000 queries (ids drawn at random, so rows are in no order and query
sizes vary, about 100 each), one float32 column: ``pad_by_query(ids, scores)`` lays them out as
padded ``[Q, L]`` lists with their mask, and ``unpad_by_query`` gives the rows back (asserted
exact). The floor is ``torch.argsort(ids, stable=True)``: grouping rows by query needs at least
a sort of the ids. Measured with the ids ``0..Q-1`` and with the same queries under sparse ids
spread over the whole int64 range (which take one more sort, in ``torch.unique``). The two are
timed in rounds close in time (best of 3 each); the table shows the median times and the median
of the per-round ratios. One thread unless ``--threads`` says otherwise.

Run: ``python benchmarks/bench_grouping.py`` (``--device cuda`` on a GPU).
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _timing import best_ms, describe

from torch_ndcg import pad_by_query, unpad_by_query

# The budget: padding takes at most this many times one stable argsort of the ids.
BUDGET = 4.0
# Rounds of (sort, pad) timings close in time: the machine's speed drifts between them.
ROUNDS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(0, args.queries, (args.rows,), generator=generator)
    scores = torch.rand(args.rows, generator=generator).to(device)
    # Sparse ids over the whole int64 range: each query code gets a random 64-bit id.
    spread = torch.randint(-(2**63), 2**63 - 1, (args.queries,), generator=generator)
    id_sets = {"ids 0..Q-1": codes.to(device), "sparse int64 ids": spread[codes].to(device)}

    print(
        f"{args.rows:,} rows of {args.queries:,} queries, one float32 column, "
        f"torch {torch.__version__}, {describe(device)}"
    )
    print()
    print("| ids | stable argsort ms | pad_by_query ms | ratio (budget) | unpad_by_query ms |")
    print("|---|---:|---:|---:|---:|")
    for name, ids in id_sets.items():
        (lists,), mask, _, slots = pad_by_query(ids, scores)
        assert torch.equal(unpad_by_query(lists, slots), scores)
        assert int(mask.sum()) == args.rows
        rounds = [
            (
                best_ms(lambda ids=ids: torch.argsort(ids, stable=True), repeats=3, device=device),
                best_ms(lambda ids=ids: pad_by_query(ids, scores), repeats=3, device=device),
            )
            for _ in range(ROUNDS)
        ]
        t_sort, t_pad = (statistics.median(times) for times in zip(*rounds, strict=True))
        ratio = statistics.median(pad / sort for sort, pad in rounds)
        t_unpad = best_ms(lambda lists=lists, slots=slots: unpad_by_query(lists, slots))
        verdict = "within" if ratio <= BUDGET else "OVER"
        print(
            f"| {name} | {t_sort:.1f} | {t_pad:.1f} | {ratio:.2f}x ({verdict} {BUDGET:.0f}x) "
            f"| {t_unpad:.1f} |"
        )


if __name__ == "__main__":
    main()
