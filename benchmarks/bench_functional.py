"""Functional nDCG@10 against scikit-learn and against the floor of one ``torch.topk``.

20,000 lists x 100 items, graded 0-4 labels, scores rounded to 1/20 so that most lists have
ties, including at the k=10 boundary. Prints times and ratios measured in this one process.

Run: ``python benchmarks/bench_functional.py`` (``--device cuda`` on a GPU; scikit-learn always
runs on the CPU).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _timing import best_ms, describe
from sklearn.metrics import ndcg_score

from torch_ndcg import ndcg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lists", type=int, default=20_000)
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)

    generator = torch.Generator().manual_seed(0)
    shape = (args.lists, args.items)
    target = torch.randint(0, 5, shape, generator=generator)
    preds = (torch.rand(shape, generator=generator) * 20).round() / 20
    k = args.k
    cpu_preds, cpu_target = preds.numpy(), target.numpy()
    preds, target = preds.to(device), target.to(device)

    t_topk = best_ms(lambda: preds.topk(k, dim=-1), repeats=15, device=device)
    t_average = best_ms(lambda: ndcg(preds, target, k=k, gain="linear"), repeats=15, device=device)
    t_first = best_ms(
        lambda: ndcg(preds, target, k=k, gain="linear", ties="first"), repeats=15, device=device
    )
    t_sklearn = best_ms(lambda: ndcg_score(cpu_target, cpu_preds, k=k), repeats=2)

    ours_average = ndcg(preds, target, k=k, gain="linear").mean().item()
    ours_first = ndcg(preds, target, k=k, gain="linear", ties="first").mean().item()
    reference = ndcg_score(cpu_target, cpu_preds, k=k)
    reference_ignore = ndcg_score(cpu_target, cpu_preds, k=k, ignore_ties=True)

    print(
        f"{args.lists} lists x {args.items} items, k={k}, torch {torch.__version__}, "
        f"{describe(device)}"
    )
    print(
        f"mean nDCG@{k}: ours average {ours_average:.12f}, sklearn {reference:.12f} "
        f"(|diff| {abs(ours_average - reference):.1e})"
    )
    print(
        f"               ours first   {ours_first:.12f}, "
        f"sklearn ignore_ties {reference_ignore:.12f}"
        " (sklearn's argsort order is not stable, so these differ on tied data)"
    )
    print()
    print("| what | time (ms) | ratio |")
    print("|---|---:|---:|")
    print(f"| torch.topk(k) (floor) | {t_topk:.1f} | 1.00x topk |")
    print(f"| ndcg, ties='average' | {t_average:.1f} | {t_average / t_topk:.2f}x topk |")
    print(f"| ndcg, ties='first' | {t_first:.1f} | {t_first / t_topk:.2f}x topk |")
    print(
        f"| sklearn ndcg_score | {t_sklearn:.1f} | {t_sklearn / t_average:.0f}x slower than ours |"
    )
    assert np.isclose(ours_average, reference, rtol=0, atol=1e-6)


if __name__ == "__main__":
    main()
