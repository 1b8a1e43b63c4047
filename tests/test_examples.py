"""The examples run, and the data set they use matches its README."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ranking_data import load_split

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    assert "Järvelin DCG@6 = 8.10" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "queries", "rows", "longest"), [("train", 201, 3005, 27), ("test", 50, 768, 24)]
)
def test_ranking_data_shapes(name: str, queries: int, rows: int, longest: int) -> None:
    split = load_split(name)
    assert split.features.shape == (rows, 300)
    assert len(split.query_sizes) == queries
    features, labels, mask = split.padded()
    assert features.shape == (queries, longest, 300)
    assert int(mask.sum()) == rows
    assert labels[mask].tolist() == split.labels.tolist()


def test_train_ranker_progress_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    import train_ranker

    plot = tmp_path / "curves.png"
    argv = ["--epochs", "2", "--seeds", "0", "--no-lightgbm", "--log-every", "1"]
    means = train_ranker.main([*argv, "--plot", str(plot)])
    out = capsys.readouterr().out
    assert set(means) == set(train_ranker.LOSSES)
    for name in train_ranker.LOSSES:
        for epoch in (1, 2):
            assert f"{name} | seed 0 | epoch {epoch}/2 | train loss " in out
    assert "| model (mean over seeds) | nDCG@1 | nDCG@3 | nDCG@5 | nDCG@10 |" in out
    assert "| model | test nDCG@10, mean ± sd over 1 seed(s) | against " in out
    assert out.count("one seed: no test") == len(train_ranker.LOSSES) - 1
    assert "total run time" in out
    data = plot.read_bytes()
    assert len(data) > 1000
    assert data.startswith(PNG_MAGIC)


def test_bench_host_prints_every_row() -> None:
    """The command `docs/benchmarks.md` quotes runs as written (its timings cut short here)."""
    script = EXAMPLES.parent / "benchmarks" / "bench_host.py"
    command = [sys.executable, str(script), "--repeats", "1", "--seconds", "0.001"]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=300).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith(("ndcg ", "NDCG.update"))]
    assert [row[1] for row in rows] == ["8x10", "8x10", "256x100", "256x100"]
    assert all(int(row[3]) > 0 and int(row[4]) > 0 for row in rows)  # ops, Python calls


def test_bench_losses_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = EXAMPLES.parent / "benchmarks" / "bench_losses.py"
    bench = runpy.run_path(str(path), run_name="bench_losses")
    results = {
        (16, 128, "lambda"): ({"ms": 1.0, "mib": 0.0}, {"ms": 4.0, "mib": 10.0}),
        (16, 256, "lambda"): ({"ms": 2.0, "mib": 0.5}, {"ms": 16.0, "mib": 40.0}),
        (16, 128, "approx"): ({"ms": 1.5, "mib": 1.0}, None),
        (16, 256, "approx"): (None, None),
    }
    plot = tmp_path / "bench.png"
    bench["plot_scaling"](plot, results, 16, "test")
    assert plot.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(("rounds", "runs"), [(2, 5), (3, 7)])
def test_bench_losses_peers_times_rounds_in_pairs_of_both_orders(rounds: int, runs: int) -> None:
    """`--peers`' interleaving: rounds in pairs of both orders (an odd count made even); the
    ratio is the peer's time over ours."""
    import time

    path = EXAMPLES.parent / "benchmarks" / "bench_losses.py"
    bench = runpy.run_path(str(path), run_name="bench_losses")
    preds = torch.zeros(2, 3, requires_grad=True)
    order: list[str] = []  # the runs of calls of one step

    def step(name: str) -> torch.Tensor:
        if not order or order[-1] != name:
            order.append(name)
        if name == "peer":
            time.sleep(0.002)
        return preds.sum()

    steps = {"ours": lambda: step("ours"), "peer": lambda: step("peer")}
    times, ratio = bench["_interleaved_per_call_ms"](steps, preds, rounds)
    # Sizing (ours, peer), then rounds ours-peer, peer-ours, ...: a peer-first round's first
    # run joins the peer's run before it, so 2 rounds make 5 runs and 4 rounds 7.
    assert order == ["ours", "peer"] * (runs // 2) + ["ours"]
    assert times["peer"] > 2
    assert ratio > 2


def test_approx_with_allrank_reduction_has_allranks_gradient() -> None:
    """``--allrank``: ours summed over lists / their number trains as allRank's approxNDCGLoss."""
    import torch
    import train_ranker

    from benchmarks.bench_losses import import_allrank

    if import_allrank("/tmp/allrank_site") is None:
        pytest.skip("allRank is not installed (pip install --no-deps --target /tmp/allrank_site)")
    models = train_ranker.allrank_models("/tmp/allrank_site")
    lists = train_ranker.load_lists("train")
    labels, mask = lists.labels[:16], lists.mask[:16]
    labels[3] = 0  # a list with no relevant item: where the two reductions differ
    scores = torch.randn(labels.shape, generator=torch.Generator().manual_seed(0))
    grads = []
    for name in ("allRank approxNDCGLoss (alpha 1)", "ApproxNDCGLoss, allRank's reduction"):
        leaf = scores.clone().requires_grad_()
        models[name](leaf, labels, mask).backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-7)


def test_train_ranker_sets_threads_only_when_asked() -> None:
    import train_ranker

    before = torch.get_num_threads()
    argv = ["--epochs", "1", "--seeds", "0", "--no-lightgbm", "--no-plot", "--log-every", "0"]
    try:
        train_ranker.main(argv)
        assert torch.get_num_threads() == before  # torch's default is left alone
        train_ranker.main([*argv, "--threads", "1"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_train_ranker_seed_summary_separates_what_the_seeds_can() -> None:
    import train_ranker
    from scipy.stats import ttest_rel

    best, close, far = [0.70, 0.72, 0.71, 0.73], [0.71, 0.70, 0.72, 0.72], [0.60, 0.61, 0.63, 0.62]
    lines = train_ranker.seed_summary(
        {"best": best, "close": close, "far": far}, {"best": 1.0, "close": 2.0, "far": 0.5}
    )
    rows = {line.split(" | ")[0][2:]: line for line in lines[2:]}
    assert "(best)" in rows["best"]
    assert f"p {ttest_rel(close, best).pvalue:.3f}: not separated" in rows["close"]
    assert f"p {ttest_rel(far, best).pvalue:.3f}: separated" in rows["far"]
    assert "0.6150 ± 0.0129" in rows["far"]
    assert rows["far"].endswith("| 0.50 s |")
