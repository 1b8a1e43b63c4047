"""Ranking losses, forward + backward: time and peak extra memory against allRank 1.4.3.

Cases B x L = 64 x 128, 16 x 1,024 and 4 x 8,192; float32 scores (``requires_grad``) and graded
0-4 labels. Ours: ``LambdaRankLoss(weighting="ndcg2pp")`` and ``ApproxNDCGLoss()``; allRank:
``lambdaLoss(weighing_scheme="ndcgLoss2PP_scheme")`` and ``approxNDCGLoss`` (alpha 1), measured in
the same run when allRank is importable (``pip install --no-deps allrank==1.4.3``; a private
``--target`` directory can be given with ``--allrank-path``).

Method. Every (loss, case) runs in a fresh subprocess that first imports torch, torch_ndcg and
allRank, builds its inputs and runs one trivial backward (autograd's one-off start-up); its peak
resident set size so far (``resource.getrusage`` ``ru_maxrss``) is the baseline. It then runs
forward + backward once and reads the peak RSS again: the difference is the extra memory the loss
needed at its peak. A fresh process per case keeps one case's peak from masking another's. Time
is the best of several runs (``benchmarks/_timing.py``). allRank is skipped ("n/a") where about
ten ``[B, L, L]`` float tensors reach 10 GiB (B x L = 4 x 8,192).

On CUDA (``--device cuda``) both run on the GPU, times are taken to the end of the queued work,
and memory is ``torch.cuda.max_memory_allocated`` over what was allocated before the step.

Run: ``python benchmarks/bench_losses.py`` (under ``flock`` on a shared machine; ``--device cuda``
on a GPU).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

CASES = [(64, 128), (16, 1_024), (4, 8_192)]
ALLRANK_LIMIT_BYTES = 10 * 2**30
ALLRANK_TENSORS = 10  # about ten [B, L, L] tensors live at once in allRank's losses


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


def peak_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(name: str, batch: int, length: int, allrank_path: str, device_name: str) -> None:
    """Measure one loss on one case; print a JSON line."""
    import torch
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
    if name == "ours-lambda":
        loss_fn = lambda: lambda_ours(preds, target)  # noqa: E731
    elif name == "ours-approx":
        loss_fn = lambda: approx_ours(preds, target)  # noqa: E731
    elif name == "allrank-lambda":
        loss_fn = lambda: allrank.lambdaLoss(  # noqa: E731
            preds, target, weighing_scheme="ndcgLoss2PP_scheme"
        )
    else:
        loss_fn = lambda: allrank.approxNDCGLoss(preds, target)  # noqa: E731

    def step() -> None:
        preds.grad = None
        loss_fn().backward()

    # Start autograd's engine on a trivial graph first, so that its one-off cost is in the
    # baseline and not charged to whichever loss runs first.
    torch.ones(1, requires_grad=True, device=device).sum().backward()
    if on_cuda:
        synchronize(device)
        allocated = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        extra = (torch.cuda.max_memory_allocated(device) - allocated) / 2**20
    else:
        baseline = peak_mib()
        step()
        extra = peak_mib() - baseline
    repeats = 5 if batch * length * length <= 2**24 else 2
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", nargs=3, metavar=("NAME", "B", "L"))
    parser.add_argument("--allrank-path", default="/tmp/allrank_site")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.worker:
        name, batch, length = args.worker
        worker(name, int(batch), int(length), args.allrank_path, args.device)
        return

    import torch
    from _timing import describe

    have_allrank = import_allrank(args.allrank_path) is not None
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {describe(device)}, allRank: {have_allrank}")
    print()
    print("| B x L | loss | ours | allRank 1.4.3 | ours vs allRank |")
    print("|---|---|---:|---:|---:|")
    for batch, length in CASES:
        too_big = ALLRANK_TENSORS * batch * length * length * 4 >= ALLRANK_LIMIT_BYTES
        for kind, label in (("lambda", "LambdaRank (NDCG-Loss2++)"), ("approx", "ApproxNDCG")):
            ours = measure(f"ours-{kind}", batch, length, args.allrank_path, args.device)
            peer = None
            if have_allrank and not too_big:
                peer = measure(f"allrank-{kind}", batch, length, args.allrank_path, args.device)
            print(
                f"| {batch} x {length:,} | {label} | {cell(ours)} | {cell(peer)} | "
                f"{ratio(ours, peer)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
