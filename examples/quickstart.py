"""Quickstart: nDCG@k of a batch of ranked lists, and the parity recipes of the peers.

Run: ``python examples/quickstart.py``
"""

from __future__ import annotations

import torch

from torch_ndcg import dcg, ndcg


def main() -> None:
    # Two lists of five items: the model's scores and the graded relevance labels (0-3).
    preds = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.5], [0.1, 0.4, 0.35, 0.8, 0.4]])
    target = torch.tensor([[3, 2, 3, 0, 1], [0, 1, 2, 0, 3]])

    print("nDCG@3 per list (exponential gain, the default):", ndcg(preds, target, k=3))
    print("nDCG@1,3,5 in one pass:\n", ndcg(preds, target, k=[1, 3, 5]))
    print("batch mean nDCG@5:", ndcg(preds, target, k=5).mean().item())

    # scikit-learn / torchmetrics convention: linear gain, tied scores averaged.
    print("sklearn-style nDCG:", ndcg(preds, target, gain="linear"))
    # LightGBM's eval convention: exponential gain, stable ties, empty lists score 1.
    print(
        "LightGBM-style nDCG@3:", ndcg(preds, target, k=3, ties="first", empty_target_action="pos")
    )

    # Padded lists: mark padding with a label (-1) or a bool mask.
    padded_target = torch.tensor([[3, 2, 3, -1, -1], [0, 1, 2, 0, 3]])
    print("with padding:", ndcg(preds, padded_target, ignore_index=-1))

    # The Järvelin-Kekäläinen worked example: relevances 3, 2, 3, 0, 1, 2 in ranked order.
    ranked = torch.tensor([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    relevances = torch.tensor([3, 2, 3, 0, 1, 2])
    value = dcg(ranked, relevances, gain="linear", discount="jarvelin")
    print(f"Järvelin DCG@6 = {value.item():.2f} (the paper's 8.10)")


if __name__ == "__main__":
    main()
