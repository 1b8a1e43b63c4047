"""Train one small scorer with each ranking loss on real data; report test nDCG@1/3/5/10.

Data: ``examples/data/`` (LightGBM's lambdarank example: 300 features, labels 0-4, 201 training
and 50 test queries). Protocol: a 300 -> 64 -> 1 MLP with ReLU, Adam (lr 1e-3, weight decay
1e-4), 16 lists per batch, 150 epochs, seeds 0-9, for ``LambdaRankLoss(weighting="ndcg2pp")``,
``ApproxNDCGLoss()``, ``NeuralNDCGLoss()`` (temperature 1), ``SoftmaxLoss()``, ``XENDCGLoss()``,
``PLRankLoss(k=10)`` (100 sampled rankings a list), ``RankNetLoss()``, ``ListMLELoss()`` and
``ListMLELoss(position_aware=True)``, and a pointwise MSE baseline; next to
LightGBM's ``LGBMRanker(n_estimators=100)`` with ``objective="lambdarank"`` and
``"rank_xendcg"`` on the same split. Test nDCG: ``torch_ndcg.NDCG`` with its defaults
(exponential gain, log2 discount, tied scores averaged, a list with no relevant item scores 0),
the mean over test queries. The last table gives test nDCG@10 as mean ± sd over the seeds, the
training time per epoch, and each model against the best by a paired t-test over seeds.

Every run evaluates test nDCG@10 after each epoch (under ``torch.no_grad`` and a forked RNG, so
the training is the same as without it), prints a progress line every ``--log-every`` epochs and
draws the learning curves (test nDCG@10 against epoch, the mean over seeds per loss, one thin line
per seed, LightGBM as a flat reference) to ``--plot`` (``train_ranker.png`` by default; needs
matplotlib, skipped with a note without it).

Run: ``python examples/train_ranker.py --threads 1`` (about 10 minutes on one core);
``--epochs 3 --seeds 0`` for a quick check.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from ranking_data import NUM_FEATURES, PaddedLists, load_split
from torch import Tensor, nn

from torch_ndcg import (
    NDCG,
    ApproxNDCGLoss,
    LambdaRankLoss,
    ListMLELoss,
    NeuralNDCGLoss,
    PairedTestResult,
    PLRankLoss,
    RankNetLoss,
    SoftmaxLoss,
    XENDCGLoss,
    paired_t_test,
)

CUTOFFS = (1, 3, 5, 10)
LossFn = Callable[[Tensor, Tensor, Tensor], Tensor]
# Called after every epoch (and once before the first, epoch 0, with loss NaN) with the epoch,
# the model and the mean training loss over that epoch's batches.
EpochHook = Callable[[int, nn.Module, float], None]
PROTOCOL = "300-64-1 MLP, Adam lr 1e-3, wd 1e-4, 16 lists/batch"


def load_lists(name: str) -> PaddedLists:
    """The ``"train"`` or ``"test"`` split of ``examples/data/`` as padded lists."""
    return load_split(name).padded_lists()


def mse_loss(preds: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Pointwise baseline: squared error on the real items."""
    return ((preds - target) ** 2)[mask].mean()


LOSSES: dict[str, LossFn] = {
    "LambdaRankLoss (ndcg2pp)": LambdaRankLoss(weighting="ndcg2pp", validate_args=False),
    "ApproxNDCGLoss": ApproxNDCGLoss(validate_args=False),
    "NeuralNDCGLoss": NeuralNDCGLoss(validate_args=False),
    "SoftmaxLoss": SoftmaxLoss(validate_args=False),
    "XENDCGLoss": XENDCGLoss(validate_args=False),
    # PL-Rank optimises the expected nDCG at a cut-off: the one the table reports (as the PL-Rank
    # papers train for theirs); 100 sampled rankings a list, its default.
    "PLRankLoss (k=10)": PLRankLoss(k=10, validate_args=False),
    "RankNetLoss": RankNetLoss(validate_args=False),
    "ListMLELoss": ListMLELoss(validate_args=False),
    "ListMLELoss (position-aware)": ListMLELoss(position_aware=True, validate_args=False),
    "MSE (pointwise)": mse_loss,
}


def allrank_models(path: str) -> dict[str, LossFn]:
    """The losses of ``--allrank``: allRank 1.4.3's ``approxNDCGLoss``, ours with its reduction.

    allRank averages over all lists of a batch, ours (``reduction="mean"``) over the lists with
    a relevant item: the sum over lists divided by their number is allRank's reduction.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_losses import import_allrank

    losses = import_allrank(path)
    if losses is None:
        raise SystemExit(f"allRank is not importable from {path!r}")
    summed = ApproxNDCGLoss(reduction="sum", validate_args=False)

    def allrank_approx(preds: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        padded = torch.where(mask, target, torch.full_like(target, -1.0))  # allRank's padding
        return losses.approxNDCGLoss(preds, padded)  # type: ignore[no-any-return]

    def approx_mean_over_all_lists(preds: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        return summed(preds, target, mask) / preds.shape[0]

    return {
        "allRank approxNDCGLoss (alpha 1)": allrank_approx,
        "ApproxNDCGLoss, allRank's reduction": approx_mean_over_all_lists,
    }


def test_ndcg(scores: Tensor, test: PaddedLists) -> list[float]:
    """Mean test nDCG at :data:`CUTOFFS`, accumulated by the ``NDCG`` metric."""
    metric = NDCG(k=list(CUTOFFS))
    metric.update(scores, test.labels, test.mask)
    return [float(metric.compute()[f"ndcg@{k}"]) for k in CUTOFFS]


def train_mlp(
    loss_fn: LossFn,
    train: PaddedLists,
    *,
    seed: int,
    epochs: int,
    on_epoch: EpochHook | None = None,
) -> nn.Module:
    """Train the 300 -> 64 -> 1 MLP with ``loss_fn`` on 16 lists per batch.

    ``on_epoch`` (if given) runs under ``torch.no_grad`` and a forked global RNG, so whatever it
    does (evaluate, print) leaves the training itself unchanged.
    """
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(NUM_FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(seed)

    def hook(epoch: int, mean_loss: float) -> None:
        if on_epoch is not None:
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                on_epoch(epoch, model, mean_loss)

    hook(0, float("nan"))
    for epoch in range(1, epochs + 1):
        losses = []
        for batch in torch.randperm(len(train.labels), generator=generator).split(16):
            scores = model(train.features[batch]).squeeze(-1)
            loss = loss_fn(scores, train.labels[batch], train.mask[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        hook(epoch, float(torch.stack(losses).mean()) if losses else float("nan"))
    return model


def train_and_track(
    name: str,
    loss_fn: LossFn,
    train: PaddedLists,
    test: PaddedLists,
    *,
    seed: int,
    epochs: int,
    log_every: int,
) -> tuple[list[float], list[float], float]:
    """Final test nDCG at :data:`CUTOFFS`, test nDCG@10 per epoch and seconds per epoch.

    The curve starts at epoch 0 (untrained); the time per epoch leaves the evaluation out.

    Prints a progress line before training (epoch 0), after epoch 1, every ``log_every`` epochs
    and after the last one.
    """
    curve: list[float] = []
    started = time.perf_counter()
    evaluating = 0.0
    width = len(str(epochs))

    def on_epoch(epoch: int, model: nn.Module, mean_loss: float) -> None:
        nonlocal evaluating
        evaluation_started = time.perf_counter()
        evaluate(epoch, model, mean_loss)
        evaluating += time.perf_counter() - evaluation_started

    def evaluate(epoch: int, model: nn.Module, mean_loss: float) -> None:
        curve.append(test_ndcg(model(test.features).squeeze(-1), test)[-1])
        if log_every > 0 and (epoch == 1 or epoch == epochs or epoch % log_every == 0):
            loss = "-" if epoch == 0 else f"{mean_loss:.4f}"
            print(
                f"{name} | seed {seed} | epoch {epoch:>{width}}/{epochs} | "
                f"train loss {loss} | test nDCG@10 {curve[-1]:.4f} | "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )

    model = train_mlp(loss_fn, train, seed=seed, epochs=epochs, on_epoch=on_epoch)
    seconds_per_epoch = (time.perf_counter() - started - evaluating) / max(epochs, 1)
    with torch.no_grad():
        values = test_ndcg(model(test.features).squeeze(-1), test)
    return values, curve, seconds_per_epoch


LIGHTGBM_OBJECTIVES = ("lambdarank", "rank_xendcg")


def lightgbm_scores(
    train: PaddedLists, test: PaddedLists, objective: str = "lambdarank", seed: int = 0
) -> tuple[Tensor, float] | None:
    """``LGBMRanker(n_estimators=100)`` test scores (padded like ``test``) and fit seconds.

    None without lightgbm.
    ``seed`` is LightGBM's ``random_state``: ``rank_xendcg`` draws its target noise from it,
    ``lambdarank`` at its defaults draws nothing (every seed gives the same trees).
    """
    try:
        from lightgbm import LGBMRanker
    except ImportError:
        return None
    ranker = LGBMRanker(n_estimators=100, objective=objective, random_state=seed, verbose=-1)
    started = time.perf_counter()
    ranker.fit(train.flat.features, train.flat.labels, group=train.flat.query_sizes)
    seconds = time.perf_counter() - started
    scores = torch.zeros(test.mask.shape)
    scores[test.mask] = torch.from_numpy(ranker.predict(test.flat.features)).float()
    return scores, seconds


def seed_summary(runs: dict[str, list[float]], seconds: dict[str, float]) -> list[str]:
    """Markdown lines: test nDCG@10 (mean ± sd over seeds) and training time of each model.

    Each model is set against the best by a paired t-test over seeds (the same seeds give every
    loss the same initialisation and batch order): what the seeds can separate.
    """
    best = max(runs, key=lambda name: float(np.mean(runs[name])))
    lines = [
        f"| model | test nDCG@10, mean ± sd over {len(runs[best])} seed(s) | "
        f"against {best}: difference [95% CI], p | training time |",
        "|---|---:|---|---:|",
    ]
    for name, values in runs.items():
        cell = "(best)"
        if name != best and len(values) > 1:
            test = paired_t_test(torch.tensor(values), torch.tensor(runs[best]))
            assert isinstance(test, PairedTestResult)
            low, high = float(test.low), float(test.high)
            verdict = "separated" if float(test.pvalue) < 0.05 else "not separated"
            difference, p = float(test.mean_difference), float(test.pvalue)
            cell = f"{difference:+.4f} [{low:+.4f}, {high:+.4f}], p {p:.3f}: {verdict}"
        elif name != best:
            cell = "one seed: no test"
        sd = float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
        lines.append(
            f"| {name} | {np.mean(values):.4f} ± {sd:.4f} | {cell} | {seconds[name]:.2f} s |"
        )
    return lines


def plot_curves(
    path: Path,
    curves: dict[str, list[list[float]]],
    seeds: list[int],
    reference: tuple[str, float] | None,
) -> bool:
    """Draw test nDCG@10 against epoch to ``path`` (PNG); False (nothing drawn) without matplotlib.

    ``curves`` maps each loss to one list per seed of nDCG@10 after epochs 0, 1, 2, ...
    """
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for index, (name, runs) in enumerate(curves.items()):
        color = f"C{index}"
        values = np.asarray(runs)
        epochs = np.arange(values.shape[1])
        for run in values:
            ax.plot(epochs, run, color=color, linewidth=0.6, alpha=0.35)
        mean = values.mean(axis=0)
        label = f"MLP + {name} (final {mean[-1]:.4f})"
        ax.plot(epochs, mean, color=color, linewidth=2, label=label)
    if reference is not None:
        name, value = reference
        ax.axhline(value, color="0.3", linestyle="--", linewidth=1, label=f"{name} ({value:.4f})")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test nDCG@10 (mean over the 50 test queries)")
    ax.set_title(
        "LightGBM lambdarank example data (201 train / 50 test queries)\n"
        f"{PROTOCOL}; mean over seeds {seeds} (thin: each seed)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--no-lightgbm", action="store_true")
    parser.add_argument(
        "--log-every", type=int, default=25, help="progress line every N epochs (0: none)"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path("train_ranker.png"),
        help="learning curves PNG (default: train_ranker.png in the current directory)",
    )
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch's CPU threads (torch.set_num_threads), set before any work; default: "
        "torch's own (one per core, or OMP_NUM_THREADS). On a machine shared with other jobs "
        "use fewer: this example took 22 min at 2 threads on a busy 2-core machine, 58 s at 1",
    )
    parser.add_argument(
        "--allrank",
        metavar="PATH",
        help="also train with allRank's approxNDCGLoss, and ours with its reduction "
        "(allRank installed there: pip install --no-deps --target PATH allrank==1.4.3)",
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    losses = dict(LOSSES) | (allrank_models(args.allrank) if args.allrank else {})
    started = time.perf_counter()
    train, test = load_lists("train"), load_lists("test")

    header = " | ".join(f"nDCG@{k}" for k in CUTOFFS)
    queries = len(test.labels)
    print(f"{args.epochs} epochs, seeds {args.seeds}; test split, mean over {queries} queries")
    print(flush=True)
    rows: list[str] = []
    means: dict[str, list[float]] = {}
    curves: dict[str, list[list[float]]] = {}
    at_10: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    for name, loss_fn in losses.items():
        runs, times = [], []
        curves[name] = []
        for seed in args.seeds:
            values, curve, per_epoch = train_and_track(
                name, loss_fn, train, test, seed=seed, epochs=args.epochs, log_every=args.log_every
            )
            runs.append(values)
            times.append(per_epoch)
            curves[name].append(curve)
            cells = " | ".join(f"{v:.4f}" for v in runs[-1])
            rows.append(f"| MLP + {name} | {seed} | {cells} |")
        means[name] = [float(v) for v in np.mean(runs, axis=0)]
        at_10[name] = [run[-1] for run in runs]
        seconds[name] = float(np.mean(times))
    reference = None
    for objective in () if args.no_lightgbm else LIGHTGBM_OBJECTIVES:
        name = f"LightGBM LGBMRanker(objective={objective!r})"
        fits = [lightgbm_scores(train, test, objective, seed) for seed in args.seeds]
        if fits[0] is None:
            break
        runs = [test_ndcg(fit[0], test) for fit in fits if fit is not None]
        means[name] = [float(v) for v in np.mean(runs, axis=0)]
        at_10[name] = [run[-1] for run in runs]
        seconds[name] = float(np.mean([fit[1] for fit in fits if fit is not None]))
        reference = reference or (name, means[name][-1])
    if args.log_every > 0:
        print()
    print(f"| model | seed | {header} |")
    print("|---|---|" + "---:|" * len(CUTOFFS))
    print("\n".join(rows))
    print()
    print(f"| model (mean over seeds) | {header} |")
    print("|---|" + "---:|" * len(CUTOFFS))
    for name, values in means.items():
        print(f"| {name} | " + " | ".join(f"{v:.4f}" for v in values) + " |")
    print()
    print("training time: per epoch for the MLPs (evaluation left out), per fit for LightGBM")
    print("\n".join(seed_summary(at_10, seconds)))
    print()
    if not args.no_plot:
        if plot_curves(args.plot, curves, args.seeds, reference):
            print(f"learning curves (test nDCG@10 per epoch): {args.plot}")
        else:
            print("matplotlib is not installed: no learning-curve plot")
    print(f"total run time {time.perf_counter() - started:.1f} s", flush=True)
    return means


if __name__ == "__main__":
    main()
