"""Ranking losses, forward + backward: time and peak extra memory against allRank 1.4.3.

Cases B x L = 64 x 128, 16 x 1,024 and 4 x 8,192; float32 scores (``requires_grad``) and graded
0-4 labels. Ours: ``LambdaRankLoss(weighting="ndcg2pp")``, ``ApproxNDCGLoss()``,
``NeuralNDCGLoss()``, ``SoftmaxLoss()``, ``XENDCGLoss()`` and ``PLRankLoss(num_samples=100)``
(allRank has no PL-Rank); allRank: ``lambdaLoss(weighing_scheme="ndcgLoss2PP_scheme")``,
``approxNDCGLoss`` (alpha 1), ``neuralNDCG`` (temperature 1, 50 Sinkhorn iterations, as ours) and
``listNet`` (the peer of both softmax losses), ``RankNetLoss()`` and ``ListMLELoss()`` at their
defaults against ``rankNet`` and ``listMLE``, measured in the same run when allRank is importable
(``pip install --no-deps allrank==1.4.3``; a private ``--target`` directory can be given with
``--allrank-path``). Where it is not, the softmax losses are measured against listNet's formula
in plain torch, labelled so.

Method. Every (loss, case) runs in a fresh subprocess that first imports torch, torch_ndcg and
allRank, builds its inputs and runs one trivial backward (autograd's one-off start-up); there its
peak resident set size is reset (Linux ``VmHWM`` after ``/proc/self/clear_refs``; ``ru_maxrss``
would start at the parent's peak) and taken as the baseline. It then runs forward + backward
once and reads the peak RSS again: the difference is the extra memory the loss needed at its
peak. A fresh process per case keeps one case's peak from masking another's. Time
is the best of several runs (``benchmarks/_timing.py``). allRank is skipped ("n/a") where the
``[B, L, L]`` float tensors it keeps reach 10 GiB: about ten for its lambdaLoss and approxNDCGLoss
(B x L = 4 x 8,192), about two per Sinkhorn iteration for its neuralNDCG. ``--losses`` picks
the losses to measure (default all).

On CUDA (``--device cuda``) both run on the GPU, times are taken to the end of the queued work,
and memory is ``torch.cuda.max_memory_allocated`` over what was allocated before the step, the
second step of the process (what the first allocated once and kept, such as cuBLAS workspaces,
is left out for both libraries).

Scaling plot. ``--plot PATH`` measures, instead of the cases above, a sweep of list lengths
(``--plot-lengths``, default L = 128 ... 2,048) at a fixed batch (``--plot-batch``, default 16),
each case in a fresh process as above (allRank skipped by the same rule), prints the sweep as the
same table and writes a PNG: time and peak extra memory against L, log scales (memory on a symlog
scale, linear below 1 MiB, as a case can need no memory beyond the process's earlier peak), ours
solid and allRank dashed, one colour per loss.

Debiased step. ``--debiased`` measures instead, in one process, a training step of
``UnbiasedLambdaRankLoss`` (clicks at logged positions, biases updated every step) and of
``LambdaRankLoss(weight=...)`` (inverse-propensity weights) against a plain ``LambdaRankLoss``
step on the same clicks (all with ``weighting="lambdarank"``, 16 x 1,024 by default, or
``--cases``), and prints each one's time as a multiple of the plain step's.

Run: ``python benchmarks/bench_losses.py`` (under ``flock`` on a shared machine; ``--device cuda``
on a GPU); ``python benchmarks/bench_losses.py --plot bench_losses.png`` for the scaling plot;
``python benchmarks/bench_losses.py --debiased`` for the debiased step.

Against the peers. ``--peers`` times, in one process on one thread, each loss at its defaults
(checks on) against its allRank peer at its defaults (``LambdaRankLoss`` against ``lambdaLoss``,
``ApproxNDCGLoss`` against ``approxNDCGLoss``, ``NeuralNDCGLoss`` against ``neuralNDCG``,
``SoftmaxLoss`` and ``XENDCGLoss`` against ``listNet``, ``RankNetLoss`` against ``rankNet``,
``ListMLELoss`` against ``listMLE``), forward + backward, interleaved (``--rounds``), at 8 x 10,
64 x 128 and 16 x 1,024 (or ``--cases``; ``--losses`` picks the losses), and prints the
speed-up (allRank's time over ours) two ways: best time over best time, and the median of the
rounds' ratios (each pair of rounds, one of each order, averaged), which a slow stretch of a
shared machine moves less:
``python benchmarks/bench_losses.py --peers``.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

CASES = [(64, 128), (16, 1_024), (4, 8_192)]
PLOT_LENGTHS = [128, 256, 512, 1_024, 2_048]
PLOT_BATCH = 16
LOSSES = (
    ("lambda", "LambdaRank (NDCG-Loss2++)"),
    ("approx", "ApproxNDCG"),
    ("neural", "NeuralNDCG"),
    ("softmax", "Softmax (ListNet)"),
    ("xendcg", "XE-NDCG"),
    ("plrank", "PL-Rank-3 (100 samples)"),
    ("ranknet", "RankNet"),
    ("listmle", "ListMLE"),
)
ALLRANK_LIMIT_BYTES = 10 * 2**30
# [B, L, L] tensors live at once in allRank's losses: about ten in lambdaLoss and approxNDCGLoss;
# neuralNDCG keeps two per Sinkhorn iteration (50) for autograd, plus about ten.
ALLRANK_TENSORS = {"lambda": 10, "approx": 10, "neural": 2 * 50 + 10, "softmax": 0, "xendcg": 0}
# allRank's rankNet lists every pair of positions in Python: about ten [B, L, L] tensors' worth.
ALLRANK_TENSORS |= {"ranknet": 10, "listmle": 0}
# The softmax losses' peer is allRank's listNet, or where allRank cannot be imported its formula in
# plain torch (labelled "listNet formula"): both O(B L).
LISTWISE = ("softmax", "xendcg")


def list_net_formula(y_pred: Any, y_true: Any, eps: float = 1e-10) -> Any:
    """The listNet loss of allRank, written from its formula.

    The softmax of the labels (padding -1 left out) against the log of the scores' softmax plus
    ``eps``; the mean over the lists.
    """
    import torch

    padded = y_true == -1
    target = torch.softmax(y_true.masked_fill(padded, -torch.inf), dim=-1)
    log_q = torch.log(torch.softmax(y_pred.masked_fill(padded, -torch.inf), dim=-1) + eps)
    return (-(target * log_q).sum(-1)).mean()


NO_ALLRANK = {"plrank"}  # allRank has no PL-Rank: ours alone


def import_allrank(path: str, device: str = "cpu") -> Any:
    """The loss modules of allRank, or ``None``; stand-ins replace its heavy import-time modules."""
    if Path(path).is_dir():
        sys.path.insert(0, path)
    dataset_loading = types.ModuleType("allrank.data.dataset_loading")
    dataset_loading.PADDED_Y_VALUE = -1  # type: ignore[attr-defined]
    model_utils = types.ModuleType("allrank.models.model_utils")
    model_utils.get_torch_device = lambda: device  # type: ignore[attr-defined]
    sys.modules.setdefault("allrank.data.dataset_loading", dataset_loading)
    sys.modules.setdefault("allrank.models.model_utils", model_utils)
    try:
        import allrank.models.losses as losses
    except ImportError:
        return None
    return losses


def worker(name: str, batch: int, length: int, allrank_path: str, device_name: str) -> None:
    """Measure one loss on one case; print a JSON line."""
    import torch
    from _memory import peak_rss_kib, reset_peak_rss
    from _timing import best_ms, synchronize

    import torch_ndcg

    device = torch.device(device_name)
    on_cuda = device.type == "cuda"
    allrank = import_allrank(allrank_path, device_name)
    generator = torch.Generator().manual_seed(0)
    preds = torch.randn(batch, length, generator=generator).to(device).requires_grad_()
    target = torch.randint(0, 5, (batch, length), generator=generator).float().to(device)
    lambda_ours = torch_ndcg.LambdaRankLoss(weighting="ndcg2pp", validate_args=False)
    approx_ours = torch_ndcg.ApproxNDCGLoss(validate_args=False)
    neural_ours = torch_ndcg.NeuralNDCGLoss(validate_args=False)
    softmax_ours = torch_ndcg.SoftmaxLoss(validate_args=False)
    xendcg_ours = torch_ndcg.XENDCGLoss(validate_args=False)
    list_net = list_net_formula if allrank is None else allrank.listNet
    if name == "ours-lambda":
        loss_fn = lambda: lambda_ours(preds, target)  # noqa: E731
    elif name == "ours-approx":
        loss_fn = lambda: approx_ours(preds, target)  # noqa: E731
    elif name == "ours-neural":
        loss_fn = lambda: neural_ours(preds, target)  # noqa: E731
    elif name == "ours-plrank":
        pl_rank = torch_ndcg.PLRankLoss(num_samples=100, validate_args=False)
        loss_fn = lambda: pl_rank(preds, target)  # noqa: E731
    elif name == "allrank-lambda":
        loss_fn = lambda: allrank.lambdaLoss(  # noqa: E731
            preds, target, weighing_scheme="ndcgLoss2PP_scheme"
        )
    elif name == "ours-softmax":
        loss_fn = lambda: softmax_ours(preds, target)  # noqa: E731
    elif name == "ours-xendcg":
        loss_fn = lambda: xendcg_ours(preds, target)  # noqa: E731
    elif name in ("allrank-softmax", "allrank-xendcg"):
        loss_fn = lambda: list_net(preds, target)  # noqa: E731
    elif name == "ours-ranknet":
        loss_fn = functools.partial(torch_ndcg.RankNetLoss(), preds, target)
    elif name == "ours-listmle":
        loss_fn = functools.partial(torch_ndcg.ListMLELoss(), preds, target)
    elif name == "allrank-ranknet":
        loss_fn = lambda: allrank.rankNet(preds, target)  # noqa: E731
    elif name == "allrank-listmle":
        loss_fn = lambda: allrank.listMLE(preds, target)  # noqa: E731
    elif name == "allrank-neural":
        loss_fn = lambda: allrank.neuralNDCG(preds, target)  # noqa: E731
    else:
        loss_fn = lambda: allrank.approxNDCGLoss(preds, target)  # noqa: E731

    def step() -> None:
        preds.grad = None
        loss_fn().backward()

    # Start autograd's engine on a trivial graph first, so that its one-off cost is in the
    # baseline and not charged to whichever loss runs first.
    torch.ones(1, requires_grad=True, device=device).sum().backward()
    if on_cuda:
        # One step first: what a process allocates once and keeps (cuBLAS workspaces, cached
        # tables) is then in the baseline, for both libraries; the peak is a step's own memory.
        step()
        synchronize(device)
        allocated = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        extra = (torch.cuda.max_memory_allocated(device) - allocated) / 2**20
    else:
        baseline = reset_peak_rss()
        step()
        extra = (peak_rss_kib() - baseline) / 1024
    repeats = 5 if batch * length * length <= 2**24 else 2
    if name.split("-")[1] in (*LISTWISE, "listmle"):  # steps of about a millisecond: many runs
        repeats = 50
    if batch * length <= 4_096:  # small batches (8 x 10): a step of about a tenth of one
        repeats = 200
    print(json.dumps({"ms": best_ms(step, repeats=repeats, device=device), "mib": extra}))


def measure(
    name: str, batch: int, length: int, allrank_path: str, device: str
) -> dict[str, float] | None:
    """Run :func:`worker` in a fresh process."""
    command = [sys.executable, __file__, "--worker", name, str(batch), str(length)]
    command += ["--allrank-path", allrank_path, "--device", device]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return None
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def cell(result: dict[str, float] | None) -> str:
    return "n/a" if result is None else f"{result['ms']:.1f} ms, {result['mib']:.0f} MiB"


def ratio(ours: dict[str, float] | None, peer: dict[str, float] | None) -> str:
    if ours is None or peer is None:
        return "n/a"
    memory = ours["mib"] / peer["mib"] if peer["mib"] > 0 else float("nan")
    return f"{peer['ms'] / ours['ms']:.1f}x faster, {memory:.2f}x memory"


Result = dict[str, float]
# (B, L, loss kind) -> (ours, allRank); None where not measured or failed.
Results = dict[tuple[int, int, str], tuple[Result | None, Result | None]]


def run_cases(
    cases: list[tuple[int, int]],
    have_allrank: bool,
    allrank_path: str,
    device: str,
    kinds: list[str] | None = None,
) -> Results:
    """Measure the losses (``kinds``, default all), ours and allRank's, on every case.

    Prints one table row per pair.
    """
    print("| B x L | loss | ours | allRank 1.4.3 | ours vs allRank |")
    print("|---|---|---:|---:|---:|")
    results: Results = {}
    for batch, length in cases:
        for kind, label in LOSSES:
            if kinds is not None and kind not in kinds:
                continue
            tensors = ALLRANK_TENSORS.get(kind, 0)
            too_big = (
                kind in NO_ALLRANK or tensors * batch * length * length * 4 >= ALLRANK_LIMIT_BYTES
            )
            ours = measure(f"ours-{kind}", batch, length, allrank_path, device)
            peer = None
            if (have_allrank or kind in LISTWISE) and not too_big:
                peer = measure(f"allrank-{kind}", batch, length, allrank_path, device)
            results[(batch, length, kind)] = (ours, peer)
            shown = cell(peer)
            if kind in LISTWISE and not have_allrank:
                shown = f"listNet formula: {shown}"
            print(
                f"| {batch} x {length:,} | {label} | {cell(ours)} | {shown} | "
                f"{ratio(ours, peer)} |",
                flush=True,
            )
    return results


def plot_scaling(path: Path, results: Results, batch: int, title: str) -> None:
    """Two panels, time and peak extra memory against list length L (log scales), to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(11, 4.5), layout="constrained")
    lengths = sorted({length for b, length, _ in results if b == batch})
    for index, (kind, label) in enumerate(LOSSES):
        for side, who, style in ((0, "ours", "-"), (1, "allRank 1.4.3", "--")):
            points = [
                (length, result)
                for length in lengths
                if (result := results.get((batch, length, kind), (None, None))[side]) is not None
            ]
            if not points:
                continue
            xs = [length for length, _ in points]
            for ax, key in ((time_ax, "ms"), (memory_ax, "mib")):
                ax.plot(
                    xs,
                    [result[key] for _, result in points],
                    style,
                    marker="o",
                    color=f"C{index}",
                    label=f"{label}, {who}",
                )
    for ax, ylabel in (
        (time_ax, "forward + backward time, ms (best of runs)"),
        (memory_ax, "peak extra memory, MiB (symlog: linear below 1)"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [f"{length:,}" for length in lengths])
        ax.set_xlabel(f"list length L (B = {batch} lists)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    time_ax.set_yscale("log")
    memory_ax.set_yscale("symlog", linthresh=1.0)
    memory_ax.set_ylim(bottom=0)
    time_ax.set_title("time")
    memory_ax.set_title("peak extra memory")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _interleaved_best_ms(steps: dict[str, Any], preds: Any, device: Any, rounds: int) -> Any:
    """Best time of each forward + backward step over ``rounds`` interleaved rounds.

    Interleaving spreads a shared machine's noise over all the steps alike.
    """
    from _timing import best_ms

    def timed(loss_fn: Any) -> float:
        def step() -> None:
            preds.grad = None
            loss_fn().backward()

        return best_ms(step, repeats=3, device=device)

    times: dict[str, float] = {name: float("inf") for name in steps}
    for _ in range(rounds):
        for name, loss_fn in steps.items():
            times[name] = min(times[name], timed(loss_fn))
    return times


def debiased_vs_plain(cases: list[tuple[int, int]], device_name: str, rounds: int) -> None:
    """Time debiased and IPS-weighted LambdaRank steps against a plain one; print the ratios."""
    import torch

    import torch_ndcg

    device = torch.device(device_name)
    plain = torch_ndcg.LambdaRankLoss(validate_args=False)
    print("| B x L | plain LambdaRankLoss | UnbiasedLambdaRankLoss | IPS weight= |")
    print("|---|---:|---:|---:|")
    for batch, length in cases:
        generator = torch.Generator().manual_seed(0)
        preds = torch.randn(batch, length, generator=generator).to(device).requires_grad_()
        positions = torch.stack([torch.randperm(length, generator=generator) for _ in range(batch)])
        labels = torch.randint(0, 5, (batch, length), generator=generator)
        clicks = torch_ndcg.simulate_clicks(labels, positions, generator=generator).to(device)
        positions = positions.to(device)
        weight = 1 / torch_ndcg.examination_probability(positions)
        unbiased = torch_ndcg.UnbiasedLambdaRankLoss(num_positions=length, validate_args=False)
        unbiased.to(device)
        steps = {
            "plain": functools.partial(plain, preds, clicks),
            "unbiased": functools.partial(unbiased, preds, clicks, positions),
            "ips": functools.partial(plain, preds, clicks, weight=weight),
        }
        times = _interleaved_best_ms(steps, preds, device, rounds)
        base = times["plain"]
        print(
            f"| {batch} x {length:,} | {base:.1f} ms | {times['unbiased']:.1f} ms "
            f"({times['unbiased'] / base:.2f}x) | {times['ips']:.1f} ms "
            f"({times['ips'] / base:.2f}x) |",
            flush=True,
        )


PEER_CASES = [(8, 10), (64, 128), (16, 1_024)]
# Each loss at its defaults against its allRank peer at its defaults (the names are allRank's).
PEERS = (
    ("lambda", "LambdaRankLoss", "lambdaLoss"),
    ("approx", "ApproxNDCGLoss", "approxNDCGLoss"),
    ("neural", "NeuralNDCGLoss", "neuralNDCG"),
    ("softmax", "SoftmaxLoss", "listNet"),
    ("xendcg", "XENDCGLoss", "listNet"),
    ("ranknet", "RankNetLoss", "rankNet"),
    ("listmle", "ListMLELoss", "listMLE"),
)


def _interleaved_per_call_ms(
    steps: dict[str, Any], preds: Any, rounds: int
) -> tuple[dict[str, float], float]:
    """Best time per call of each forward + backward step, and the median per-round ratio.

    Each round times a batch of calls of each step in turn (calls enough for about 20 ms), the
    order alternating from round to round: a short step is timed over many calls, and a change
    of the machine's load falls on both. The rounds come in pairs, one of each order
    (``rounds`` rounded up to even). The ratio is the ``"peer"`` step's time over the
    ``"ours"`` step's in the same round, the two timed next to each other (a slower stretch of
    the machine that covers a round moves both); each pair's two ratios are averaged
    geometrically, as the step timed second runs a few per cent slower, and the median over the
    pairs is returned.
    """
    import math
    import statistics
    import time

    def step_of(loss_fn: Any) -> Any:
        def step() -> None:
            preds.grad = None
            loss_fn().backward()

        return step

    calls = {}
    for name, loss_fn in steps.items():
        step = step_of(loss_fn)
        step()
        start = time.perf_counter()
        step()
        calls[name] = max(1, int(0.02 / max(time.perf_counter() - start, 1e-6)))
    times = {name: float("inf") for name in steps}
    ratios = []
    for round_index in range(rounds + rounds % 2):
        names = list(steps) if round_index % 2 == 0 else list(reversed(steps))
        this_round = {}
        for name in names:
            step = step_of(steps[name])
            start = time.perf_counter()
            for _ in range(calls[name]):
                step()
            this_round[name] = (time.perf_counter() - start) / calls[name] * 1e3
            times[name] = min(times[name], this_round[name])
        ratios.append(this_round["peer"] / this_round["ours"])
    pairs = zip(ratios[::2], ratios[1::2], strict=True)
    paired = [math.sqrt(first * second) for first, second in pairs]
    return times, statistics.median(paired)


def against_peers(
    cases: list[tuple[int, int]], allrank_path: str, rounds: int, kinds: list[str] | None
) -> None:
    """Each loss at its defaults against its allRank peer: interleaved, one thread; print speed.

    Both take the same float32 scores; ours the int64 labels, allRank the same labels as float
    (as each library's documentation passes them). Two speed-ups (above 1: ours is faster):
    the peer's best time over ours, each the best of ``rounds`` interleaved rounds, and the
    median over pairs of rounds (one of each order) of the two's ratio
    (`_interleaved_per_call_ms`). ``kinds`` picks the losses (``--losses``; ``None``: all).
    """
    import torch

    import torch_ndcg

    allrank = import_allrank(allrank_path)
    if allrank is None:
        raise SystemExit(f"--peers needs allRank at --allrank-path ({allrank_path})")
    print("| loss | allRank peer | B x L | ours | allRank | best over best | median of rounds |")
    print("|---|---|---|---:|---:|---:|---:|")
    for kind, ours_name, peer_name in PEERS:
        ours_loss = getattr(torch_ndcg, ours_name, None)
        if ours_loss is None or (kinds is not None and kind not in kinds):
            continue
        ours, peer = ours_loss(), getattr(allrank, peer_name)
        for batch, length in cases:
            if peer_name == "neuralNDCG" and batch * length * length > 2**20:
                continue  # allRank's neuralNDCG takes over a minute a step at 16 x 1,024
            generator = torch.Generator().manual_seed(0)
            preds = torch.randn(batch, length, generator=generator).requires_grad_()
            labels = torch.randint(0, 5, (batch, length), generator=generator)
            float_labels = labels.float()
            steps = {
                "ours": functools.partial(ours, preds, labels),
                "peer": functools.partial(peer, preds, float_labels),
            }
            times, speed_up = _interleaved_per_call_ms(steps, preds, rounds)
            print(
                f"| `{ours_name}` | `{peer_name}` | {batch} x {length:,} | "
                f"{times['ours']:.3f} ms | {times['peer']:.3f} ms | "
                f"{times['peer'] / times['ours']:.2f}x | {speed_up:.2f}x |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", nargs=3, metavar=("NAME", "B", "L"))
    parser.add_argument("--allrank-path", default="/tmp/allrank_site")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--plot", type=Path, help="sweep list lengths and write this PNG")
    parser.add_argument("--plot-lengths", type=int, nargs="+", default=PLOT_LENGTHS)
    parser.add_argument("--plot-batch", type=int, default=PLOT_BATCH)
    parser.add_argument(
        "--losses", nargs="+", choices=[kind for kind, _ in LOSSES], help="default: all"
    )
    parser.add_argument(
        "--cases", nargs="+", metavar="BxL", help="cases such as 16x1024 (default: the three)"
    )
    parser.add_argument(
        "--debiased", action="store_true", help="debiased and IPS steps against a plain one"
    )
    parser.add_argument(
        "--peers", action="store_true", help="each loss against its allRank peer, one thread"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args()
    if args.worker:
        name, batch, length = args.worker
        worker(name, int(batch), int(length), args.allrank_path, args.device)
        return

    import torch
    from _timing import describe

    if args.peers:
        torch.set_num_threads(1)
    have_allrank = import_allrank(args.allrank_path) is not None
    device = torch.device(args.device)
    description = f"torch {torch.__version__}, {describe(device)}, allRank: {have_allrank}"
    print(description)
    print()
    cases = CASES
    if args.cases:
        cases = [(int(b), int(n)) for b, n in (case.split("x") for case in args.cases)]
    if args.peers:
        peer_cases = cases if args.cases else PEER_CASES
        against_peers(peer_cases, args.allrank_path, args.rounds, args.losses)
        return
    if args.debiased:
        debiased_vs_plain(cases if args.cases else [(16, 1_024)], args.device, args.rounds)
        return
    if args.plot is None:
        run_cases(cases, have_allrank, args.allrank_path, args.device, args.losses)
        return
    cases = [(args.plot_batch, length) for length in args.plot_lengths]
    results = run_cases(cases, have_allrank, args.allrank_path, args.device, args.losses)
    title = f"Ranking losses, forward + backward, float32 ({description})"
    plot_scaling(args.plot, results, args.plot_batch, title)
    print()
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
