r"""Learn to rank from simulated clicks: naive, inverse-propensity weighted, debiased LambdaRank.

Data: ``examples/data/`` (LightGBM's lambdarank example: 201 training and 50 test queries, labels
0-4). Clicks are simulated on the training queries by the position-based model of the unbiased
learning-to-rank literature (``torch_ndcg.simulate_clicks``): position $i$ (0-based) is
examined with probability $(1 / (i + 1))^\eta$ ($\eta$ = ``--eta``, 1 by default), an
examined item with label $y$ is clicked with probability $0.1 + 0.9 (2^y - 1) / 15$.

The logged rankings come from a logging ranker, the 300 -> 64 -> 1 MLP trained with
``LambdaRankLoss`` on the true labels of 5% of the training queries (10 queries). Two protocols:

- ``stochastic`` (the main one): each session ranks the whole list by the logger's scores
  (standardised) plus Gumbel noise, so an item is shown at many positions and position and
  relevance can be told apart; ``--sessions`` sessions per query (2,000, the issue's size).
- ``top10``: the logger's own ranking every session, only the top 10 shown (the others are
  never examined); 30 sessions per query unless ``--sessions`` says otherwise.
- ``sessions``: the sessions of ``stochastic`` (200 per query unless ``--sessions`` says
  otherwise) read as a click log is: each step takes one random session of each of its 16
  queries, an epoch is one pass over the training queries, ``--epochs`` (40 here) are trained
  with no hyper-parameter chosen, and the methods are full information, naive
  (``LambdaRankLoss`` on the session's clicks), IPS with the true propensities (``weight=``)
  and ``UnbiasedLambdaRankLoss(num_positions=<longest list>, ignore_index=-1)`` at its
  defaults (`session_step_losses`).

The rest describes the summed protocols.

The sessions are summed per query, item and display position (`ClickSums`: clicks and views
per session at each position), so the networks train at the cost of one list per query
whatever the number of sessions. Methods, each trained on the same clicks (test nDCG@10 on
the true test labels):

- full information: ``LambdaRankLoss`` on the true labels (the upper bound);
- naive: ``LambdaRankLoss(gain="linear")`` on the click-through rates;
- IPS (true propensities): the same on the clicks divided by the examination probability of
  their position (``weight = 1 / examination_probability`` on the clicks of a session, summed);
- ``UnbiasedLambdaRankLoss.aggregated`` on the click and view counts, its biases fixed at the
  true ones (the pairwise loss with known propensities) or learnt (Unbiased LambdaRank);
- IPS with learnt propensities: ``LambdaRankLoss`` on the clicks divided by the $t^+$ that
  ``UnbiasedLambdaRankLoss`` learns alongside (its bias update run on each batch);
- XGBoost's and LightGBM's debiased LambdaMART: ``rank:ndcg`` with ``lambdarank_unbiased=True``
  (each session a query group in display order), and ``lambdarank`` with the sessions'
  ``position`` column, on the first ``--tree-sessions`` (50) sessions of each query: their
  debiased objectives take a query group in display order, so each session is a group of its
  own and the rows grow with the sessions (50: 150,000 rows of 300 features; all 2,000 would
  be 6 million rows, 7 GB).

Hyper-parameters are chosen on the true labels of a validation split of the training queries
(20%), never on the test queries: the number of epochs (up to ``--epochs``, Adam lr 1e-3,
weight decay 1e-4, 16 queries per step, as in ``train_ranker.py``), ``bias_norm`` of the
learnt methods (among ``--bias-norms``) and the number of trees (25, 50, 100 or 200); each
method is then retrained on all the training queries and scored once on the test queries.
Printed: test nDCG@10 as mean ± sd over ``--seeds`` (each seed draws its own logger queries,
sessions, clicks, validation split and initial weights), the paired difference to naive
training, the fraction of the naive -> full-information gap each method closes with a
bootstrap interval, and the position biases learnt against the simulation's examination
ratios $\theta_i / \theta_0$; ``--plot`` draws them.

Run: ``python examples/train_from_clicks.py`` (seeds 0 and 1, about 1.5 minutes a seed on a
quiet CPU core); ``--seeds 0 1 2 3 4`` for the table of the docs; ``--protocol sessions
--seeds 0 1 2 3 4`` for the per-session table (15 s a seed); ``--momentum`` sets the learnt
loss's (0.9: the update the summed tables were run with); ``--tiny`` for a quick check.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
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
    dcg,
    examination_probability,
    ndcg,
    simulate_clicks,
)

LOGGER_FRACTION = 0.05
TOP_SHOWN = 10
VAL_FRACTION = 0.2  # of the training queries, to choose hyper-parameters on
METHODS = ("full", "naive", "ips", "ips_pairs", "learnt", "learnt_ips")
DIAGNOSTICS = ("learnt_paper",)  # run only when named in --methods
SESSION_METHODS = ("full", "naive", "ips", "learnt")  # --protocol sessions


@dataclass(frozen=True)
class ClickLog:
    """Sessions of the training queries: ``[Q, S, L]`` display positions and clicks."""

    positions: Tensor  # int64, -1 = not shown (and padding)
    clicks: Tensor  # float 0/1


def make_mlp() -> nn.Module:
    """The 300 -> 64 -> 1 MLP of ``train_ranker.py``."""
    return nn.Sequential(nn.Linear(NUM_FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))


StepLoss = Callable[[Tensor, Tensor], Tensor]  # (scores [b, L], query batch) -> loss
Curve = list[tuple[int, float]]  # (epochs, validation nDCG@10)

EVAL_EVERY = 5  # epochs between two validation scores


def subset(lists: PaddedLists, queries: Tensor) -> PaddedLists:
    """The lists of ``queries`` (no flat rows)."""
    return PaddedLists(lists.features[queries], lists.labels[queries], lists.mask[queries], None)  # type: ignore[arg-type]


def concatenate(first: PaddedLists, second: PaddedLists) -> PaddedLists:
    """The queries of both, padded to the longer list (no flat rows)."""
    length = max(first.mask.shape[-1], second.mask.shape[-1])

    def pad(value: Tensor) -> Tensor:
        grow = length - value.shape[1]
        return torch.cat([value, value.new_zeros((len(value), grow, *value.shape[2:]))], dim=1)

    fields = [
        torch.cat([pad(getattr(first, name)), pad(getattr(second, name))])
        for name in ("features", "labels", "mask")
    ]
    return PaddedLists(*fields, None)  # type: ignore[arg-type]


def cross_fit_splits(queries: int, folds: int, seed: int) -> list[tuple[Tensor, Tensor]]:
    """``folds`` (training, test) query splits: each query is a test query exactly once."""
    order = torch.randperm(queries, generator=torch.Generator().manual_seed(50_000 + seed))
    parts = order.tensor_split(folds)
    return [
        (torch.cat([part for j, part in enumerate(parts) if j != i]), test)
        for i, test in enumerate(parts)
    ]


def train(
    step_loss: StepLoss,
    train_lists: PaddedLists,
    *,
    seed: int,
    epochs: int,
    val: PaddedLists | None = None,
) -> tuple[nn.Module, Curve]:
    """Train the MLP: each step scores 16 queries and takes ``step_loss`` of their scores.

    With ``val``, the validation nDCG@10 (true labels) every `EVAL_EVERY` epochs is returned.
    """
    torch.manual_seed(seed)
    model = make_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    order = torch.Generator().manual_seed(seed)
    queries = len(train_lists.labels)
    curve: Curve = []
    for epoch in range(1, epochs + 1):
        for batch in torch.randperm(queries, generator=order).split(16):
            scores = model(train_lists.features[batch]).squeeze(-1)
            loss = step_loss(scores, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if val is not None and epoch % EVAL_EVERY == 0:
            with torch.no_grad():
                curve.append((epoch, test_ndcg(model(val.features).squeeze(-1), val)[-1]))
    return model, curve


def train_logger(train_lists: PaddedLists, seed: int, epochs: int) -> nn.Module:
    """The logging ranker: the MLP trained on the labels of 5% of the training queries."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    chosen = torch.randperm(len(train_lists.labels), generator=generator)
    chosen = chosen[: max(1, round(LOGGER_FRACTION * len(chosen)))]
    logged = subset(train_lists, chosen)
    loss_fn = LambdaRankLoss()
    return train(
        lambda scores, batch: loss_fn(scores, logged.labels[batch], logged.mask[batch]),
        logged,
        seed=seed,
        epochs=epochs,
    )[0]


def log_sessions(
    logger_scores: Tensor,
    train_lists: PaddedLists,
    *,
    protocol: str,
    sessions: int,
    seed: int,
    eta: float = 1.0,
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
    clicks = simulate_clicks(labels, positions, mask=mask, eta=eta, generator=generator)
    return ClickLog(positions, clicks)


@dataclass(frozen=True)
class ClickSums:
    """A click log averaged over its sessions, per query, item and display position.

    ``clicks``, ``views`` ``[Q, L, positions]``: how often (per session) each item was clicked
    and shown at each position, what `UnbiasedLambdaRankLoss.aggregated` takes. The
    click-through rate is ``clicks.sum(-1)``; the inverse-propensity estimate of an item's click
    probability when examined is ``clicks @ (1 / propensity)``.
    """

    clicks: Tensor
    views: Tensor

    def __getitem__(self, queries: Tensor) -> ClickSums:
        return ClickSums(self.clicks[queries], self.views[queries])

    def rates(self, propensity: Tensor | None = None) -> Tensor:
        """``[Q, L]`` clicks per session, each divided by its position's ``propensity``."""
        return self.clicks.sum(-1) if propensity is None else self.clicks @ propensity.reciprocal()


def sum_sessions(log: ClickLog, num_positions: int) -> ClickSums:
    """Average the sessions of every query: training then costs the same for any session count."""
    queries, sessions, length = log.positions.shape
    shown = (log.positions >= 0).reshape(-1)
    item = torch.arange(queries)[:, None, None] * length + torch.arange(length)
    index = (item * num_positions + log.positions.clamp(min=0)).reshape(-1)[shown]
    size = queries * length * num_positions
    views = torch.zeros(size).index_add_(0, index, torch.ones(len(index)))
    clicks = torch.zeros(size).index_add_(0, index, log.clicks.reshape(-1)[shown])
    shape = (queries, length, num_positions)
    return ClickSums(clicks.view(shape) / sessions, views.view(shape) / sessions)


def true_biases(num_positions: int, eta: float = 1.0) -> Tensor:
    """The simulation's examination ratios theta_i / theta_0 (t+ of the true propensities)."""
    ratio = examination_probability(torch.arange(num_positions), eta=eta)
    return ratio / ratio[0]


def step_losses(
    sums: ClickSums, lists: PaddedLists, bias_norm: float, eta: float = 1.0, **unbiased_options: Any
) -> dict[str, Any]:
    """Every MLP method's step loss on ``lists`` and their click ``sums``; the learnt module.

    ``unbiased_options``: more options of the learnt `UnbiasedLambdaRankLoss` (``momentum``).
    """
    num_positions = sums.clicks.shape[-1]
    labelled, linear = LambdaRankLoss(), LambdaRankLoss(gain="linear")
    unbiased = UnbiasedLambdaRankLoss(
        num_positions=num_positions, bias_norm=bias_norm, **unbiased_options
    )
    fixed = UnbiasedLambdaRankLoss(num_positions=num_positions).eval()  # biases stay as set
    fixed.t_plus.copy_(true_biases(num_positions, eta))
    ctr, ips = sums.rates(), sums.rates(true_biases(num_positions, eta))

    # LambdaRank normalises each list's pair weights by its ideal DCG (a session's by that of its
    # clicks); summed sessions by that of the list's click-through rates, the normaliser of the
    # naive loss, through a factor 1 / sqrt(Z) on both counts (their product weighs the pairs).
    ideal = dcg(ctr, ctr, gain="linear", mask=lists.mask)
    scale = torch.where(ideal > 0, ideal.clamp(min=1e-12).rsqrt(), 0)[:, None, None]
    clicks, views = sums.clicks * scale, sums.views * scale

    def pairs(loss_fn: UnbiasedLambdaRankLoss) -> StepLoss:
        return lambda s, b: loss_fn.aggregated(s, clicks[b], views[b], lists.mask[b])

    # Diagnostic: the paper's update, each position compared with the top of every list (with
    # lists of unequal length, deep positions come out too small: see `match_exposure`).
    paper = UnbiasedLambdaRankLoss(
        num_positions=num_positions, bias_norm=bias_norm, match_exposure=False, **unbiased_options
    )

    def learnt_ips(scores: Tensor, batch: Tensor) -> Tensor:
        with torch.no_grad():  # the module's bias update on this batch, from the ranker's scores
            unbiased.aggregated(scores, clicks[batch], views[batch], lists.mask[batch])
        labels = sums[batch].rates(unbiased.t_plus)
        return linear(scores, labels, lists.mask[batch])

    return {
        "full": lambda s, b: labelled(s, lists.labels[b], lists.mask[b]),
        "naive": lambda s, b: linear(s, ctr[b], lists.mask[b]),
        "ips": lambda s, b: linear(s, ips[b], lists.mask[b]),
        "ips_pairs": pairs(fixed),
        "learnt": pairs(unbiased),
        "learnt_ips": learnt_ips,
        "learnt_paper": pairs(paper),
        "module": unbiased,
    }


def tree_sessions(
    log: ClickLog, train_lists: PaddedLists, count: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first ``count`` sessions of each query as flat rows in display order.

    Returns features, clicks, positions and the group sizes (one group per session).
    """
    shown = log.positions[:, :count]
    order = torch.where(shown >= 0, shown, shown.shape[-1]).argsort(dim=-1)
    query = torch.arange(len(shown))[:, None, None].expand_as(order)
    keep = shown.gather(-1, order) >= 0
    features = train_lists.features[query, order][keep]
    return (
        features.numpy(),
        log.clicks[:, :count].gather(-1, order)[keep].numpy(),
        shown.gather(-1, order)[keep].numpy(),
        keep.sum(-1).reshape(-1).numpy(),
    )


TREE_STAGES = (25, 50, 100, 200)


def fit_trees(
    name: str,
    features: np.ndarray,
    clicks: np.ndarray,
    positions: np.ndarray,
    groups: np.ndarray,
    trees: int,
    seed: int,
) -> Callable[[np.ndarray, int], np.ndarray]:
    """Fit one debiased LambdaMART; returns ``predict(features, trees)``."""
    if name == "xgboost":
        import xgboost

        ranker = xgboost.XGBRanker(
            objective="rank:ndcg",
            lambdarank_unbiased=True,
            n_estimators=trees,
            tree_method="hist",
            n_jobs=1,
            random_state=seed,
        )
        ranker.fit(features, clicks, group=groups)

        def predict_xgboost(features: np.ndarray, trees: int) -> np.ndarray:
            return np.asarray(ranker.predict(features, iteration_range=(0, trees)))

        return predict_xgboost
    import lightgbm

    dataset = lightgbm.Dataset(features, clicks, group=groups, position=positions)
    params = {"objective": "lambdarank", "verbose": -1, "num_threads": 1, "seed": seed}
    booster = lightgbm.train(params, dataset, num_boost_round=trees)

    def predict_lightgbm(features: np.ndarray, trees: int) -> np.ndarray:
        return np.asarray(booster.predict(features, num_iteration=trees))

    return predict_lightgbm


def flat_scores(lists: PaddedLists, predict: Callable[[np.ndarray], np.ndarray]) -> Tensor:
    """A tree model's scores of padded lists."""
    scores = torch.zeros(lists.mask.shape)
    flat = predict(lists.features[lists.mask].numpy())
    scores[lists.mask] = torch.from_numpy(np.asarray(flat, dtype=np.float32))
    return scores


def tree_results(
    log: ClickLog,
    lists: PaddedLists,
    fit: Tensor,
    val: Tensor,
    test: PaddedLists,
    args: argparse.Namespace,
    seed: int,
) -> tuple[dict[str, Tensor], dict[str, int]]:
    """Per-query test nDCG@10 of XGBoost's and LightGBM's debiased LambdaMART (those installed).

    The number of trees is chosen among `TREE_STAGES` (up to ``--trees``) on the validation
    queries, then the model is refitted on all the training queries.
    """
    results: dict[str, Tensor] = {}
    chosen: dict[str, int] = {}
    stages = [n for n in TREE_STAGES if n < args.trees] + [args.trees]
    for name in ("xgboost", "lightgbm"):
        try:
            __import__(name)
        except ImportError:
            continue
        on_fit = tree_sessions(
            ClickLog(log.positions[fit], log.clicks[fit]), subset(lists, fit), args.tree_sessions
        )
        predict = fit_trees(name, *on_fit, args.trees, seed)
        val_lists = subset(lists, val)
        scores = {
            n: test_ndcg(flat_scores(val_lists, partial(predict, trees=n)), val_lists)[-1]
            for n in stages
        }
        chosen[name] = max(stages, key=lambda n: scores[n])
        predict = fit_trees(
            name, *tree_sessions(log, lists, args.tree_sessions), chosen[name], seed
        )
        results[name] = per_query(flat_scores(test, partial(predict, trees=chosen[name])), test)
    return results, chosen


def per_query(scores: Tensor, lists: PaddedLists) -> Tensor:
    """``[Q]`` nDCG@10 of each test query (their mean is ``test_ndcg``'s)."""
    return ndcg(scores, lists.labels, k=10, mask=lists.mask)


def best_epochs(curve: Curve) -> tuple[int, float]:
    """The epoch count with the best validation nDCG@10, smoothed (the earliest of equals).

    The validation queries are few (40): one checkpoint's score is noisy, so each is averaged
    with its neighbours (a window of ``3 * EVAL_EVERY`` epochs) before the best is taken.
    """
    scores = [score for _, score in curve]
    smoothed = [statistics.fmean(scores[max(0, i - 1) : i + 2]) for i in range(len(scores))]
    best = max(range(len(curve)), key=lambda i: (smoothed[i], -i))
    return curve[best][0], smoothed[best]


def session_step_losses(
    log: ClickLog, lists: PaddedLists, seed: int, eta: float = 1.0, **unbiased: Any
) -> dict[str, Any]:
    """Every method's step loss on one random logged session per query; the learnt module.

    Each call draws one of the ``S`` sessions of each query of the batch (the same draws for
    every method: one generator per method, seeded alike) and takes the loss of its clicks, as
    a click log is read. ``unbiased`` are options of `UnbiasedLambdaRankLoss` (its defaults
    when none).
    """
    clicks = torch.where(log.positions >= 0, log.clicks, -1.0)  # -1: not shown (or padding)
    weight = examination_probability(log.positions.clamp(min=0), eta=eta).reciprocal()
    draws = torch.Generator().manual_seed(30_000 + seed)
    labelled, clicked = LambdaRankLoss(), LambdaRankLoss(ignore_index=-1)
    module = UnbiasedLambdaRankLoss(num_positions=lists.mask.shape[-1], ignore_index=-1, **unbiased)

    def session(batch: Tensor) -> tuple[Tensor, Tensor]:
        return batch, torch.randint(log.clicks.shape[1], batch.shape, generator=draws)

    def naive(scores: Tensor, batch: Tensor) -> Tensor:
        return clicked(scores, clicks[session(batch)])

    def ips(scores: Tensor, batch: Tensor) -> Tensor:
        at = session(batch)
        return clicked(scores, clicks[at], weight=weight[at])

    def learnt(scores: Tensor, batch: Tensor) -> Tensor:
        at = session(batch)
        return module(scores, clicks[at], log.positions[at])

    return {
        "full": lambda s, b: labelled(s, lists.labels[b], lists.mask[b]),
        "naive": naive,
        "ips": ips,
        "learnt": learnt,
        "module": module,
    }


def learnt_options(args: argparse.Namespace) -> dict[str, Any]:
    """Options of the learnt `UnbiasedLambdaRankLoss` given on the command line (``--momentum``)."""
    return {} if args.momentum is None else {"momentum": args.momentum}


def run_sessions_seed(
    args: argparse.Namespace, train_lists: PaddedLists, test: PaddedLists, seed: int
) -> tuple[dict[str, Tensor], Tensor, dict[str, Any]]:
    """The per-session protocol: each method ``--epochs`` epochs on one session per query a step.

    No hyper-parameter is chosen: every loss at its defaults, as a first use would.
    """
    logger = train_logger(train_lists, seed, args.logger_epochs)
    with torch.no_grad():
        logger_scores = logger(train_lists.features).squeeze(-1)
        results = {"logger": per_query(logger(test.features).squeeze(-1), test)}
    log = log_sessions(
        logger_scores,
        train_lists,
        protocol="stochastic",
        sessions=args.sessions,
        seed=seed,
        eta=args.eta,
    )
    module = None
    for name in args.methods:
        losses = session_step_losses(log, train_lists, seed, args.eta, **learnt_options(args))
        model, _ = train(losses[name], train_lists, seed=seed, epochs=args.epochs)
        with torch.no_grad():
            results[name] = per_query(model(test.features).squeeze(-1), test)
        if name == "learnt" or module is None:
            module = losses["module"]
    assert module is not None
    estimate = module.statistics[0] / module.statistics[2]  # (t+)^(p + 1): unshrunk
    return results, torch.stack([module.t_plus, module.t_minus, estimate]), {}


def run_seed(
    args: argparse.Namespace, train_lists: PaddedLists, test: PaddedLists, seed: int
) -> tuple[dict[str, Tensor], Tensor, dict[str, Any]]:
    """Each method's per-query test nDCG@10 (one seed), the learnt biases ``[3, positions]``.

    Hyper-parameters (epochs; ``bias_norm`` of the learnt method; trees) are chosen on the true
    labels of a validation split of the training queries (`VAL_FRACTION`), then each method is
    retrained on all the training queries and scored once on the test queries.
    """
    if args.protocol == "sessions":
        return run_sessions_seed(args, train_lists, test, seed)
    logger = train_logger(train_lists, seed, args.logger_epochs)
    with torch.no_grad():
        logger_scores = logger(train_lists.features).squeeze(-1)
        results = {"logger": per_query(logger(test.features).squeeze(-1), test)}
    log = log_sessions(
        logger_scores,
        train_lists,
        protocol=args.protocol,
        sessions=args.sessions,
        seed=seed,
        eta=args.eta,
    )
    num_positions = train_lists.mask.shape[-1]
    sums = sum_sessions(log, num_positions)
    order = torch.randperm(
        len(train_lists.labels), generator=torch.Generator().manual_seed(40_000 + seed)
    )
    n_val = round(VAL_FRACTION * len(order))
    val, fit = order[:n_val], order[n_val:]
    fit_lists, val_lists = subset(train_lists, fit), subset(train_lists, val)
    chosen: dict[str, Any] = {}
    final: dict[str, Any] = {}
    for name in args.methods:
        options = args.bias_norms if name.startswith("learnt") else [2.0]
        best = None
        for bias_norm in options:
            losses = step_losses(sums[fit], fit_lists, bias_norm, args.eta, **learnt_options(args))
            _, curve = train(losses[name], fit_lists, seed=seed, epochs=args.epochs, val=val_lists)
            epochs, score = best_epochs(curve)
            if best is None or score > best[2]:
                best = (bias_norm, epochs, score)
        assert best is not None
        bias_norm, epochs, _ = best
        chosen[name] = {"epochs": epochs}
        if name.startswith("learnt"):
            chosen[name]["bias_norm"] = bias_norm
        losses = step_losses(sums, train_lists, bias_norm, args.eta, **learnt_options(args))
        model, _ = train(losses[name], train_lists, seed=seed, epochs=epochs)
        with torch.no_grad():
            results[name] = per_query(model(test.features).squeeze(-1), test)
        if name == "learnt":
            final = losses
    if not args.no_trees:
        trees, chosen["trees"] = tree_results(log, train_lists, fit, val, test, args, seed)
        results.update(trees)
    if not final:  # no learnt method: the biases of the last losses built (never updated)
        final = step_losses(sums, train_lists, 2.0, args.eta)
    module: UnbiasedLambdaRankLoss = final["module"]
    estimate = module.statistics[0] / module.statistics[2]  # (t+)^(p + 1): unshrunk
    return results, torch.stack([module.t_plus, module.t_minus, estimate]), chosen


LABELS = {
    "logger": "the logging ranker (5% of the queries' labels)",
    "full": "LambdaRankLoss on the true labels (full information)",
    "naive": "LambdaRankLoss on click-through rates (naive)",
    "ips": "LambdaRankLoss on click-through rates / true propensity (IPS)",
    "ips_pairs": "UnbiasedLambdaRankLoss.aggregated, biases fixed at the true ones",
    "learnt": "UnbiasedLambdaRankLoss.aggregated, learnt biases",
    "learnt_ips": "LambdaRankLoss on click-through rates / learnt t+ (IPS, learnt biases)",
    "learnt_paper": "diagnostic: learnt biases, the paper's update (match_exposure=False)",
    "xgboost": "XGBoost rank:ndcg, lambdarank_unbiased=True",
    "lightgbm": "LightGBM lambdarank with the position column",
}
SESSION_LABELS = {  # --protocol sessions: the losses of one session's clicks
    "naive": "LambdaRankLoss on the session's clicks (naive)",
    "ips": "LambdaRankLoss on the session's clicks / true propensity (IPS)",
    "learnt": "UnbiasedLambdaRankLoss on the session's clicks, at its defaults",
}


def plot_biases(path: Path, biases: Tensor, shown: int, eta: float = 1.0) -> bool:
    """Learnt t+ per position (mean and each seed) against the true examination ratio."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    positions = np.arange(1, shown + 1)
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    curves = (
        (2, "C0", "learnt $S^+_i / R^+_i$"),
        (0, "C1", "$t^+$ used ($p$ chosen on validation)"),
    )
    for row, color, label in curves:
        for run in biases[:, row, :shown].numpy():
            ax.plot(positions, run, color=color, linewidth=0.6, alpha=0.4)
        mean = biases[:, row, :shown].mean(0).numpy()
        ax.plot(positions, mean, color=color, linewidth=2, marker="o", label=f"{label} (mean)")
    true = (1 / positions) ** eta
    ax.plot(positions, true, color="k", linestyle="--", label="true $\\theta_i/\\theta_1$")
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
    """Run the seeds, print the tables; each method's mean test nDCG@10 per seed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--protocol", choices=["stochastic", "sessions", "top10"], default="stochastic"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=[0, 1], help="none: only print --load's runs"
    )
    parser.add_argument("--epochs", type=int, default=100, help="most epochs tried")
    parser.add_argument("--logger-epochs", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=2_000)
    parser.add_argument("--eta", type=float, default=1.0, help="examination (1/rank)^eta")
    parser.add_argument("--bias-norms", type=float, nargs="+", default=[0.0, 1.0, 2.0])
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS + DIAGNOSTICS,
        default=list(METHODS),
        help="networks trained",
    )
    parser.add_argument(
        "--momentum",
        type=float,
        default=None,
        help="momentum of the learnt UnbiasedLambdaRankLoss (default: the loss's, 1)",
    )
    parser.add_argument("--tree-sessions", type=int, default=50)
    parser.add_argument("--trees", type=int, default=200, help="most trees tried")
    parser.add_argument("--no-trees", action="store_true", help="skip XGBoost and LightGBM")
    parser.add_argument(
        "--folds", type=int, default=1, help="cross-fit over train + test queries in K folds"
    )
    parser.add_argument("--save", type=Path, default=None, help="save the per-query results")
    parser.add_argument(
        "--load",
        type=Path,
        nargs="*",
        default=[],
        help="pool results saved by --save (for a seed in several files, methods are merged; "
        "a later file's method replaces an earlier one's)",
    )
    parser.add_argument("--tiny", action="store_true", help="a quick check (seconds)")
    parser.add_argument("--plot", type=Path, default=None, help="learnt biases PNG")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch's CPU threads (torch.set_num_threads), set before any work; default 1, "
        "as the figures in docs/clicks.md were run (0: torch's own, one per core or "
        "OMP_NUM_THREADS)",
    )
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    given = set(argv if argv is not None else sys.argv[1:])
    if args.protocol == "top10" and "--sessions" not in given:
        args.sessions = 30
    if args.protocol == "sessions":  # the per-session protocol: its own sizes, no trees
        args.sessions = args.sessions if "--sessions" in given else 200
        args.epochs = args.epochs if "--epochs" in given else 40
        if "--methods" not in given:
            args.methods = list(SESSION_METHODS)
        if not set(args.methods) <= set(SESSION_METHODS):
            parser.error(f"--protocol sessions trains {', '.join(SESSION_METHODS)} only")
        args.no_trees = True
    if args.tiny:
        args.seeds, args.epochs, args.logger_epochs = args.seeds[:1], EVAL_EVERY, 1
        args.sessions, args.tree_sessions, args.trees = 8, 2, 3
        args.bias_norms = args.bias_norms[:1]
    started = time.perf_counter()
    train_lists, test = load_lists("train"), load_lists("test")
    runs: dict[str, list[Tensor]] = {}
    biases = []
    if args.folds > 1:  # cross-fitting: every query of the data is a test query once
        everything = concatenate(train_lists, test)
    for seed in args.seeds:
        if args.folds > 1:
            splits = cross_fit_splits(len(everything.labels), args.folds, seed)
            folds = [(subset(everything, fit), subset(everything, held)) for fit, held in splits]
        else:
            folds = [(train_lists, test)]
        per_fold: dict[str, list[Tensor]] = {}
        for fold, (fold_train, fold_test) in enumerate(folds):
            results, learnt, chosen = run_seed(args, fold_train, fold_test, seed)
            biases.append(learnt)
            for name, value in results.items():
                per_fold.setdefault(name, []).append(value)
            print(
                f"seed {seed}"
                + (f" fold {fold}" if args.folds > 1 else "")
                + ": "
                + ", ".join(f"{name} {float(value.mean()):.4f}" for name, value in results.items())
                + f" ({time.perf_counter() - started:.0f} s); chosen on validation: {chosen}",
                flush=True,
            )
        for name, values in per_fold.items():
            runs.setdefault(name, []).append(torch.cat(values))
    if args.save is not None:
        torch.save({"args": vars(args), "runs": runs, "biases": biases}, args.save)
    by_seed: dict[int, dict[str, Tensor]] = {}
    biases_by_seed: dict[int, list[Tensor]] = {}
    pool_runs(by_seed, biases_by_seed, args.seeds, runs, biases, args.methods)
    for path in args.load:  # runs of other seeds (or other methods) saved by --save
        saved = torch.load(path, weights_only=False)  # our own file: args hold paths
        if not args.seeds:  # only printing saved runs: describe them, not this command line
            for key in ("protocol", "eta", "sessions", "epochs", "folds"):
                setattr(args, key, saved["args"][key])
        pool_runs(
            by_seed,
            biases_by_seed,
            saved["args"]["seeds"],
            saved["runs"],
            saved["biases"],
            saved["args"].get("methods", list(saved["runs"])),
        )
    args.seeds = sorted(by_seed)
    names = [name for name in by_seed[args.seeds[0]] if all(name in by_seed[s] for s in by_seed)]
    left_out = sorted({name for runs_of in by_seed.values() for name in runs_of} - set(names))
    if left_out:
        print(f"left out (not run for every seed): {', '.join(left_out)}")
    runs = {name: [by_seed[seed][name] for seed in args.seeds] for name in names}
    biases = [bias for seed in args.seeds for bias in biases_by_seed[seed]]
    print_tables(args, runs, torch.stack(biases))
    if args.plot is not None:
        if plot_biases(
            args.plot, torch.stack(biases), min(TOP_SHOWN, biases[0].shape[-1]), args.eta
        ):
            print(f"learnt vs true biases: {args.plot}")
        else:
            print("matplotlib is not installed: no plot")
    print(f"total run time {time.perf_counter() - started:.1f} s", flush=True)
    return {name: [float(value.mean()) for value in values] for name, values in runs.items()}


def pool_runs(
    by_seed: dict[int, dict[str, Tensor]],
    biases_by_seed: dict[int, list[Tensor]],
    seeds: list[int],
    runs: dict[str, list[Tensor]],
    biases: list[Tensor],
    methods: list[str],
) -> None:
    """Merge one run's per-seed results (and learnt biases, ``folds`` per seed) into the pool.

    A seed's methods from several runs are merged, a later run's method replacing an earlier
    one's; the learnt biases come from the last run that trained the learnt method.
    """
    folds = len(biases) // max(len(seeds), 1)
    for index, seed in enumerate(seeds):
        entry = by_seed.setdefault(seed, {})
        for name, values in runs.items():
            entry[name] = values[index]
        if "learnt" in methods or seed not in biases_by_seed:
            biases_by_seed[seed] = biases[index * folds : (index + 1) * folds]


BOOTSTRAP = 2_000  # resamples of the seeds and the test queries for the gap's spread


def gap_closed(runs: dict[str, Tensor], name: str) -> tuple[float, float, float]:
    """Fraction of the naive -> full-information gap ``name`` closes, and its 90% interval.

    ``runs`` are ``[seeds, queries]`` per-query nDCG@10. The interval resamples the seeds and
    the test queries with replacement (the same ones for every method: the differences are
    paired); percentiles, not an sd: where a resample's gap comes near 0 the ratio is huge.
    """

    def fraction(values: dict[str, Tensor]) -> Tensor:
        naive = values["naive"].mean(dim=(-1, -2))
        return (values[name].mean(dim=(-1, -2)) - naive) / (
            values["full"].mean(dim=(-1, -2)) - naive
        )

    point = float(fraction(runs))
    seeds, queries = runs["full"].shape
    generator = torch.Generator().manual_seed(0)
    seed_pick = torch.randint(seeds, (BOOTSTRAP, seeds, 1), generator=generator)
    query_pick = torch.randint(queries, (BOOTSTRAP, 1, queries), generator=generator)
    resampled = {key: values[seed_pick, query_pick] for key, values in runs.items()}
    spread = fraction(resampled).nan_to_num(nan=0.0)
    low, high = torch.quantile(spread, torch.tensor([0.05, 0.95], dtype=spread.dtype)).tolist()
    return point, low, high


def print_tables(
    args: argparse.Namespace, per_seed: dict[str, list[Tensor]], biases: Tensor
) -> None:
    """The results table (mean ± sd, gap closed) and the learnt biases against the true ones."""
    runs = {name: torch.stack(values) for name, values in per_seed.items()}
    print()
    print(
        f"protocol {args.protocol}"
        + (f", cross-fitted in {args.folds} folds" if args.folds > 1 else "")
        + f", examination (1/rank)^{args.eta:g}: {args.sessions} sessions "
        f"per query, at most {args.epochs} "
        f"epochs, seeds {args.seeds}; test nDCG@10 ({runs['logger'].shape[-1]} queries, true "
        "labels): mean ± sd over the seeds; the difference to naive training, paired by seed; "
        "the gap closed, with the 5-95% range of bootstrap resamples of the seeds and queries"
    )
    print()
    print("| method | test nDCG@10 (mean ± sd) | − naive (mean ± sd) | gap closed [90% interval] |")
    print("|---|---:|---:|---:|")
    labels = LABELS | (SESSION_LABELS if args.protocol == "sessions" else {})
    for name in labels:
        if name not in runs:
            continue
        means = runs[name].mean(-1)
        sd = float(means.std()) if len(means) > 1 else 0.0
        closed_text = difference_text = ""
        if name != "naive" and "naive" in runs:
            difference = means - runs["naive"].mean(-1)
            difference_sd = float(difference.std()) if len(difference) > 1 else 0.0
            difference_text = f"{float(difference.mean()):+.4f} ± {difference_sd:.4f}"
        if name not in ("full", "naive", "logger") and {"full", "naive"} <= set(runs):
            closed, low, high = gap_closed(runs, name)
            closed_text = f"{closed:.0%} [{low:.0%}, {high:.0%}]"
        print(
            f"| {labels[name]} | {float(means.mean()):.4f} ± {sd:.4f} | {difference_text} "
            f"| {closed_text} |"
        )
    shown = min(TOP_SHOWN, biases.shape[-1])
    print()
    print("| position | true θ_i/θ_1 | learnt S+_i/R+_i (mean ± sd) | error | t+ used | t- used |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i in range(shown):
        true = (1 / (i + 1)) ** args.eta
        learnt = biases[:, 2, i]
        sd = float(learnt.std()) if len(learnt) > 1 else 0.0
        print(
            f"| {i + 1} | {true:.3f} | {float(learnt.mean()):.3f} ± {sd:.3f} | "
            f"{float(learnt.mean()) / true - 1:+.0%} | {float(biases[:, 0, i].mean()):.3f} | "
            f"{float(biases[:, 1, i].mean()):.3f} |"
        )


if __name__ == "__main__":
    main()
