"""Train one small scorer with each ranking loss on real data; report test nDCG@1/3/5/10.

Data: ``examples/data/`` (LightGBM's lambdarank example: 300 features, labels 0-4, 201 training
and 50 test queries). Protocol: a 300 -> 64 -> 1 MLP with ReLU, Adam (lr 1e-3, weight decay
1e-4), 16 lists per batch, 150 epochs, seeds 0 and 1, for ``LambdaRankLoss(weighting="ndcg2pp")``,
``ApproxNDCGLoss()`` and a pointwise MSE baseline; next to LightGBM's
``LGBMRanker(n_estimators=100)`` on the same split. Test nDCG: ``torch_ndcg.NDCG`` with its
defaults (exponential gain, log2 discount, tied scores averaged, a list with no relevant item
scores 0), the mean over test queries.

Run: ``python examples/train_ranker.py`` (about a minute on 2 CPU cores); ``--epochs 3 --seeds 0``
for a quick check.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch
from ranking_data import NUM_FEATURES, PaddedLists, load_split
from torch import Tensor, nn

from torch_ndcg import NDCG, ApproxNDCGLoss, LambdaRankLoss

CUTOFFS = (1, 3, 5, 10)
LossFn = Callable[[Tensor, Tensor, Tensor], Tensor]


def load_lists(name: str) -> PaddedLists:
    """The ``"train"`` or ``"test"`` split of ``examples/data/`` as padded lists."""
    return load_split(name).padded_lists()


def mse_loss(preds: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Pointwise baseline: squared error on the real items."""
    return ((preds - target) ** 2)[mask].mean()


LOSSES: dict[str, LossFn] = {
    "LambdaRankLoss (ndcg2pp)": LambdaRankLoss(weighting="ndcg2pp", validate_args=False),
    "ApproxNDCGLoss": ApproxNDCGLoss(validate_args=False),
    "MSE (pointwise)": mse_loss,
}


def test_ndcg(scores: Tensor, test: PaddedLists) -> list[float]:
    """Mean test nDCG at :data:`CUTOFFS`, accumulated by the ``NDCG`` metric."""
    metric = NDCG(k=list(CUTOFFS))
    metric.update(scores, test.labels, test.mask)
    return [float(metric.compute()[f"ndcg@{k}"]) for k in CUTOFFS]


def train_mlp(loss_fn: LossFn, train: PaddedLists, *, seed: int, epochs: int) -> nn.Module:
    """Train the 300 -> 64 -> 1 MLP with ``loss_fn`` on 16 lists per batch."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(NUM_FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for batch in torch.randperm(len(train.labels), generator=generator).split(16):
            scores = model(train.features[batch]).squeeze(-1)
            loss = loss_fn(scores, train.labels[batch], train.mask[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


def lightgbm_scores(train: PaddedLists, test: PaddedLists) -> Tensor | None:
    """``LGBMRanker(n_estimators=100)`` test scores, padded like ``test``; None without lightgbm."""
    try:
        from lightgbm import LGBMRanker
    except ImportError:
        return None
    ranker = LGBMRanker(n_estimators=100, verbose=-1)
    ranker.fit(train.flat.features, train.flat.labels, group=train.flat.query_sizes)
    scores = torch.zeros(test.mask.shape)
    scores[test.mask] = torch.from_numpy(ranker.predict(test.flat.features)).float()
    return scores


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--no-lightgbm", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    train, test = load_lists("train"), load_lists("test")

    header = " | ".join(f"nDCG@{k}" for k in CUTOFFS)
    queries = len(test.labels)
    print(f"{args.epochs} epochs, seeds {args.seeds}; test split, mean over {queries} queries")
    print()
    print(f"| model | seed | {header} |")
    print("|---|---|" + "---:|" * len(CUTOFFS))
    means: dict[str, list[float]] = {}
    for name, loss_fn in LOSSES.items():
        runs = []
        for seed in args.seeds:
            model = train_mlp(loss_fn, train, seed=seed, epochs=args.epochs)
            with torch.no_grad():
                runs.append(test_ndcg(model(test.features).squeeze(-1), test))
            cells = " | ".join(f"{v:.4f}" for v in runs[-1])
            print(f"| MLP + {name} | {seed} | {cells} |", flush=True)
        means[name] = [float(v) for v in np.mean(runs, axis=0)]
    if not args.no_lightgbm:
        scores = lightgbm_scores(train, test)
        if scores is not None:
            means["LightGBM LGBMRanker(n_estimators=100)"] = test_ndcg(scores, test)
    print()
    print(f"| model (mean over seeds) | {header} |")
    print("|---|" + "---:|" * len(CUTOFFS))
    for name, values in means.items():
        print(f"| {name} | " + " | ".join(f"{v:.4f}" for v in values) + " |")
    return means


if __name__ == "__main__":
    main()
