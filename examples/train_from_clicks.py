r"""Learn to rank from simulated clicks: naive, inverse-propensity weighted, debiased LambdaRank.

Data: ``examples/data/`` (LightGBM's lambdarank example: 201 training and 50 test queries, labels
0-4). Clicks are simulated on the training queries by the position-based model of the unbiased
learning-to-rank literature (``torch_ndcg.simulate_clicks``): position $i$ (0-based) is
examined with probability $1 / (i + 1)$, an examined item with label $y$ is clicked with
probability $0.1 + 0.9 (2^y - 1) / 15$.

The logged rankings come from a logging ranker, the 300 -> 64 -> 1 MLP trained with
``LambdaRankLoss`` on the true labels of 5% of the training queries (10 queries). Two protocols:

- ``stochastic`` (the main one): each session ranks the whole list by the logger's scores
  (standardised) plus Gumbel noise, so an item is shown at many positions and position and
  relevance can be told apart; ``--sessions`` sessions per query (default 200; the issue's
  protocol is 2,000).
- ``top10``: the logger's own ranking every session, only the top 10 shown (the others are
  never examined), ``--sessions`` (30 in the issue's protocol) per query.

Methods, each trained on the same clicks (test nDCG@10 on the true test labels):

- full information: ``LambdaRankLoss`` on the true labels (the upper bound);
- naive: ``LambdaRankLoss`` on each session's clicks;
- IPS (true propensities): the same with ``weight = 1 / examination_probability(positions)``;
- learnt (Unbiased LambdaRank): ``UnbiasedLambdaRankLoss`` on the clicks and positions;
- XGBoost's and LightGBM's debiased LambdaMART: ``rank:ndcg`` with ``lambdarank_unbiased=True``
  (each session a query group in display order), and ``lambdarank`` with the sessions'
  ``position`` column, on ``--tree-sessions`` sessions per query (default 20; 50 in the issue).

The MLP methods use the protocol of ``train_ranker.py`` (Adam, lr 1e-3, weight decay 1e-4, 16
queries per step), with ``--sessions-per-step`` sessions of each query in a step and ``--epochs``
passes over the queries. Printed: test nDCG@10 as mean ± sd over ``--seeds`` (each seed draws
its own logger queries, sessions, clicks and initial weights), the fraction of the naive ->
full-information gap each method closes, and the position biases the debiased loss learnt
against the simulation's examination ratios $\theta_i / \theta_0$; ``--plot`` draws them.

Run: ``python examples/train_from_clicks.py`` (seeds 0 and 1, about 2.5 minutes a seed on 2 idle
CPU cores); ``--seeds 0 1 2 3 4`` for the table of the docs (about 13 minutes); ``--full`` for
the issue's protocol sizes (2,000 sessions, 50 tree sessions, 200 trees; much longer);
``--tiny`` for a quick check.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ranking_data import NUM_FEATURES, PaddedLists
from torch import Tensor, nn
from train_ranker import load_lists, test_ndcg

from torch_ndcg import (
    LambdaRankLoss,
    UnbiasedLambdaRankLoss,
    examination_probability,
    simulate_clicks,
)

LOGGER_FRACTION = 0.05
TOP_SHOWN = 10


@dataclass(frozen=True)
class ClickLog:
    """Sessions of the training queries: ``[Q, S, L]`` display positions and clicks."""

    positions: Tensor  # int64, -1 = not shown (and padding)
    clicks: Tensor  # float 0/1


def make_mlp() -> nn.Module:
    """The 300 -> 64 -> 1 MLP of ``train_ranker.py``."""
    return nn.Sequential(nn.Linear(NUM_FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))


StepLoss = Callable[[Tensor, Tensor], Tensor]  # (scores [b, L], query batch) -> loss


def train(step_loss: StepLoss, train_lists: PaddedLists, *, seed: int, epochs: int) -> nn.Module:
    """Train the MLP: each step scores 16 queries and takes ``step_loss`` of their scores."""
    torch.manual_seed(seed)
    model = make_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    order = torch.Generator().manual_seed(seed)
    queries = len(train_lists.labels)
    for _ in range(epochs):
        for batch in torch.randperm(queries, generator=order).split(16):
            scores = model(train_lists.features[batch]).squeeze(-1)
            loss = step_loss(scores, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


def train_logger(train_lists: PaddedLists, seed: int, epochs: int) -> nn.Module:
    """The logging ranker: the MLP trained on the labels of 5% of the training queries."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    chosen = torch.randperm(len(train_lists.labels), generator=generator)
    chosen = chosen[: max(1, round(LOGGER_FRACTION * len(chosen)))]
    subset = PaddedLists(
        train_lists.features[chosen], train_lists.labels[chosen], train_lists.mask[chosen], None
    )  # type: ignore[arg-type]
    loss_fn = LambdaRankLoss()
    return train(
        lambda scores, batch: loss_fn(scores, subset.labels[batch], subset.mask[batch]),
        subset,
        seed=seed,
        epochs=epochs,
    )


def log_sessions(
    logger_scores: Tensor,
    train_lists: PaddedLists,
    *,
    protocol: str,
    sessions: int,
    seed: int,
) -> ClickLog:
    """Rank each query ``sessions`` times and simulate the clicks."""
    generator = torch.Generator().manual_seed(20_000 + seed)
    mask = train_lists.mask[:, None, :].expand(-1, sessions, -1)
    real = logger_scores[mask[:, 0]]
    standardised = (logger_scores - real.mean()) / real.std()
    keys = standardised[:, None, :].expand(-1, sessions, -1)
    if protocol == "stochastic":
        uniform = torch.rand(keys.shape, generator=generator).clamp_(min=1e-12)
        keys = keys - torch.log(-torch.log(uniform))  # + Gumbel(0, 1): Plackett-Luce sampling
    keys = torch.where(mask, keys, -torch.inf)
    positions = keys.argsort(dim=-1, descending=True, stable=True).argsort(dim=-1)
    shown = mask if protocol == "stochastic" else mask & (positions < TOP_SHOWN)
    positions = torch.where(shown, positions, -1)
    labels = train_lists.labels[:, None, :].expand(-1, sessions, -1)
    clicks = simulate_clicks(labels, positions, mask=mask, generator=generator)
    return ClickLog(positions, clicks)


def session_batch(
    log: ClickLog, batch: Tensor, per_step: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """``per_step`` random sessions of each query in ``batch``.

    Returns each session's row in ``batch`` (to pick its scores), its positions and its clicks.
    """
    picks = torch.randint(log.positions.shape[1], (len(batch), per_step), generator=generator)
    picked = (batch[:, None], picks)
    length = log.positions.shape[-1]
    return (
        torch.arange(len(batch)).repeat_interleave(per_step),
        log.positions[picked].reshape(-1, length),
        log.clicks[picked].reshape(-1, length),
    )


def click_losses(log: ClickLog, num_positions: int, seed: int, per_step: int) -> dict[str, Any]:
    """The three click-trained methods as step losses, and the debiased loss module."""
    generator = torch.Generator().manual_seed(30_000 + seed)
    plain = LambdaRankLoss()
    unbiased = UnbiasedLambdaRankLoss(num_positions=num_positions)

    def naive(scores: Tensor, batch: Tensor) -> Tensor:
        index, positions, clicks = session_batch(log, batch, per_step, generator)
        return plain(scores[index], clicks, positions >= 0)

    def ips(scores: Tensor, batch: Tensor) -> Tensor:
        index, positions, clicks = session_batch(log, batch, per_step, generator)
        shown = positions >= 0
        weight = 1 / examination_probability(positions).clamp(min=1e-12)
        return plain(scores[index], clicks, shown, weight=torch.where(shown, weight, 0))

    def learnt(scores: Tensor, batch: Tensor) -> Tensor:
        index, positions, clicks = session_batch(log, batch, per_step, generator)
        return unbiased(scores[index], clicks, positions)

    return {"naive": naive, "ips": ips, "learnt": learnt, "module": unbiased}


def tree_sessions(
    log: ClickLog, train_lists: PaddedLists, count: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first ``count`` sessions of each query as flat rows in display order.

    Returns features, clicks, positions and the group sizes (one group per session).
    """
    features, clicks, positions, groups = [], [], [], []
    for query in range(log.positions.shape[0]):
        for session in range(min(count, log.positions.shape[1])):
            shown = log.positions[query, session]
            items = torch.nonzero(shown >= 0).squeeze(-1)
            items = items[shown[items].argsort()]
            features.append(train_lists.features[query, items].numpy())
            clicks.append(log.clicks[query, session, items].numpy())
            positions.append(shown[items].numpy())
            groups.append(len(items))
    return (
        np.concatenate(features),
        np.concatenate(clicks),
        np.concatenate(positions),
        np.asarray(groups),
    )


def tree_scores(
    log: ClickLog, train_lists: PaddedLists, test: PaddedLists, args: argparse.Namespace, seed: int
) -> dict[str, Tensor]:
    """Test scores of XGBoost's and LightGBM's debiased LambdaMART (those installed)."""
    features, clicks, positions, groups = tree_sessions(log, train_lists, args.tree_sessions)
    out: dict[str, Tensor] = {}

    def padded(flat: np.ndarray) -> Tensor:
        scores = torch.zeros(test.mask.shape)
        scores[test.mask] = torch.from_numpy(np.asarray(flat, dtype=np.float32))
        return scores

    try:
        import xgboost
    except ImportError:
        xgboost = None
    if xgboost is not None:
        ranker = xgboost.XGBRanker(
            objective="rank:ndcg",
            lambdarank_unbiased=True,
            n_estimators=args.trees,
            tree_method="hist",
            n_jobs=2,
            random_state=seed,
        )
        ranker.fit(features, clicks, group=groups)
        out["xgboost"] = padded(ranker.predict(test.flat.features))
    try:
        import lightgbm
    except ImportError:
        lightgbm = None
    if lightgbm is not None:
        dataset = lightgbm.Dataset(features, clicks, group=groups, position=positions)
        params = {"objective": "lambdarank", "verbose": -1, "num_threads": 2, "seed": seed}
        booster = lightgbm.train(params, dataset, num_boost_round=args.trees)
        out["lightgbm"] = padded(booster.predict(test.flat.features))
    return out


def run_seed(
    args: argparse.Namespace, train_lists: PaddedLists, test: PaddedLists, seed: int
) -> tuple[dict[str, float], Tensor]:
    """Every method's test nDCG@10 for one seed, and the learnt biases ``[2, positions]``."""
    logger = train_logger(train_lists, seed, args.logger_epochs)
    with torch.no_grad():
        logger_scores = logger(train_lists.features).squeeze(-1)
        results = {"logger": test_ndcg(logger(test.features).squeeze(-1), test)[-1]}
    log = log_sessions(
        logger_scores, train_lists, protocol=args.protocol, sessions=args.sessions, seed=seed
    )
    num_positions = train_lists.mask.shape[-1]
    full_loss = LambdaRankLoss()

    def full(scores: Tensor, batch: Tensor) -> Tensor:
        return full_loss(scores, train_lists.labels[batch], train_lists.mask[batch])

    methods = click_losses(log, num_positions, seed, args.sessions_per_step)
    for name, step_loss in (("full", full), *((m, methods[m]) for m in ("naive", "ips", "learnt"))):
        model = train(step_loss, train_lists, seed=seed, epochs=args.epochs)
        with torch.no_grad():
            results[name] = test_ndcg(model(test.features).squeeze(-1), test)[-1]
    if not args.no_trees:
        for name, scores in tree_scores(log, train_lists, test, args, seed).items():
            results[name] = test_ndcg(scores, test)[-1]
    module: UnbiasedLambdaRankLoss = methods["module"]
    statistics = module.statistics
    estimate = statistics[0] / statistics[0, 0]  # (t+)^(p + 1): the unshrunk estimate
    return results, torch.stack([module.t_plus, module.t_minus, estimate])


LABELS = {
    "logger": "the logging ranker (5% of the queries' labels)",
    "full": "LambdaRankLoss on the true labels (full information)",
    "naive": "LambdaRankLoss on clicks (naive)",
    "ips": "LambdaRankLoss on clicks, weight = 1 / true propensity (IPS)",
    "learnt": "UnbiasedLambdaRankLoss on clicks + positions (learnt biases)",
    "xgboost": "XGBoost rank:ndcg, lambdarank_unbiased=True",
    "lightgbm": "LightGBM lambdarank with the position column",
}


def plot_biases(path: Path, biases: Tensor, shown: int) -> bool:
    """Learnt t+ per position (mean and each seed) against the true examination ratio."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    positions = np.arange(1, shown + 1)
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    curves = ((2, "C0", "learnt $S^+_i / S^+_1$"), (0, "C1", "$t^+$ used ($p = 2$)"))
    for row, color, label in curves:
        for run in biases[:, row, :shown].numpy():
            ax.plot(positions, run, color=color, linewidth=0.6, alpha=0.4)
        mean = biases[:, row, :shown].mean(0).numpy()
        ax.plot(positions, mean, color=color, linewidth=2, marker="o", label=f"{label} (mean)")
    ax.plot(positions, 1 / positions, color="k", linestyle="--", label="true $\\theta_i/\\theta_1$")
    ax.set_xlabel("display position (1 = top)")
    ax.set_ylabel("position bias, relative to the top")
    ax.set_yscale("log")
    ax.set_title("UnbiasedLambdaRankLoss: learnt click biases vs the simulation", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--protocol", choices=["stochastic", "top10"], default="stochastic")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--logger-epochs", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--sessions-per-step", type=int, default=16)
    parser.add_argument("--tree-sessions", type=int, default=20)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--no-trees", action="store_true", help="skip XGBoost and LightGBM")
    parser.add_argument("--full", action="store_true", help="the issue's protocol sizes")
    parser.add_argument("--tiny", action="store_true", help="a quick check (seconds)")
    parser.add_argument("--plot", type=Path, default=None, help="learnt biases PNG")
    args = parser.parse_args(argv)
    if args.full:
        args.sessions = 2_000 if args.protocol == "stochastic" else 30
        args.tree_sessions, args.trees = 50, 200
    if args.tiny:
        args.seeds, args.epochs, args.logger_epochs = args.seeds[:1], 1, 1
        args.sessions, args.sessions_per_step, args.tree_sessions, args.trees = 4, 4, 2, 3
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    started = time.perf_counter()
    train_lists, test = load_lists("train"), load_lists("test")
    runs: dict[str, list[float]] = {}
    biases = []
    for seed in args.seeds:
        results, learnt = run_seed(args, train_lists, test, seed)
        biases.append(learnt)
        for name, value in results.items():
            runs.setdefault(name, []).append(value)
        print(
            f"seed {seed}: "
            + ", ".join(f"{name} {value:.4f}" for name, value in results.items())
            + f" ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print_tables(args, runs, torch.stack(biases))
    if args.plot is not None:
        if plot_biases(args.plot, torch.stack(biases), min(TOP_SHOWN, biases[0].shape[-1])):
            print(f"learnt vs true biases: {args.plot}")
        else:
            print("matplotlib is not installed: no plot")
    print(f"total run time {time.perf_counter() - started:.1f} s", flush=True)
    return runs


def print_tables(args: argparse.Namespace, runs: dict[str, list[float]], biases: Tensor) -> None:
    """The results table (mean ± sd, gap closed) and the learnt biases against the true ones."""
    print()
    print(
        f"protocol {args.protocol}: {args.sessions} sessions per query, {args.epochs} epochs, "
        f"seeds {args.seeds}; test nDCG@10 (50 queries, true labels)"
    )
    print()
    print("| method | test nDCG@10 (mean ± sd) | gap closed |")
    print("|---|---:|---:|")
    means = {name: statistics.fmean(values) for name, values in runs.items()}
    gap = means["full"] - means["naive"]
    for name in LABELS:
        if name not in runs:
            continue
        values = runs[name]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        closed = (means[name] - means["naive"]) / gap if gap != 0 else float("nan")
        closed_text = "" if name in ("full", "naive", "logger") else f"{closed:.0%}"
        print(f"| {LABELS[name]} | {means[name]:.4f} ± {sd:.4f} | {closed_text} |")
    shown = min(TOP_SHOWN, biases.shape[-1])
    print()
    print(
        "| position | true θ_i/θ_1 | learnt S+_i/S+_1 (mean ± sd) | error | t+ used (p = 2) "
        "| t- used |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for i in range(shown):
        true = 1 / (i + 1)
        learnt = biases[:, 2, i]
        sd = float(learnt.std()) if len(learnt) > 1 else 0.0
        print(
            f"| {i + 1} | {true:.3f} | {float(learnt.mean()):.3f} ± {sd:.3f} | "
            f"{float(learnt.mean()) / true - 1:+.0%} | {float(biases[:, 0, i].mean()):.3f} | "
            f"{float(biases[:, 1, i].mean()):.3f} |"
        )


if __name__ == "__main__":
    main()
