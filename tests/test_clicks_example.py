"""examples/train_from_clicks.py runs end to end in its tiny mode and prints its tables."""

from __future__ import annotations

from pathlib import Path

import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_train_from_clicks_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    import train_from_clicks

    plot = tmp_path / "biases.png"
    runs = train_from_clicks.main(["--tiny", "--plot", str(plot)])
    out = capsys.readouterr().out
    assert {"logger", "full", "naive", "ips", "ips_pairs", "learnt", "learnt_ips"} <= set(runs)
    for name in ("xgboost", "lightgbm"):  # both are in the examples extra
        assert name in runs
    assert all(0 <= values[0] <= 1 for values in runs.values())
    header = (
        "| method | test nDCG@10 (mean ± sd) | − naive (mean ± sd) | gap closed [90% interval] |"
    )
    assert header in out
    assert "| position | true θ_i/θ_1 | learnt S+_i/R+_i (mean ± sd) |" in out
    assert plot.read_bytes().startswith(PNG_MAGIC)


def test_train_from_clicks_per_session_protocol_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    """``--protocol sessions``: one logged session per query a step, every loss at its defaults."""
    import train_from_clicks

    runs = train_from_clicks.main(["--protocol", "sessions", "--tiny"])
    out = capsys.readouterr().out
    assert set(runs) == {"logger", "full", "naive", "ips", "learnt"}
    assert all(0 <= values[0] <= 1 for values in runs.values())
    assert "UnbiasedLambdaRankLoss on the session's clicks, at its defaults" in out
    assert "| position | true θ_i/θ_1 | learnt S+_i/R+_i (mean ± sd) |" in out


def test_per_session_steps_read_one_logged_session_per_query() -> None:
    """Each step takes, for each query of the batch, the clicks and positions of one of its
    sessions, drawn alike for every method."""
    import torch
    import train_from_clicks
    from ranking_data import PaddedLists

    queries, sessions, length = 4, 5, 3
    positions = torch.arange(length).expand(queries, sessions, length).clone()
    clicks = torch.zeros(queries, sessions, length)
    for q in range(queries):
        clicks[q, q + 1 if q + 1 < sessions else 0, q % length] = 1  # one click per query
    log = train_from_clicks.ClickLog(positions, clicks)
    lists = PaddedLists(
        torch.zeros(queries, length, 2),
        torch.zeros(queries, length),
        torch.ones(queries, length, dtype=torch.bool),
        None,
    )  # type: ignore[arg-type]
    seen = {}
    for name in ("naive", "learnt"):
        losses = train_from_clicks.session_step_losses(log, lists, seed=0)
        scores = torch.zeros(queries, length, requires_grad=True)
        values = [float(losses[name](scores, torch.arange(queries)).detach()) for _ in range(6)]
        seen[name] = [value > 0 for value in values]  # a loss only where a click was drawn
    assert seen["naive"] == seen["learnt"]  # the same sessions for every method
    assert any(seen["naive"])
    assert not all(seen["naive"])
    assert losses["module"].num_positions == length
    assert losses["module"].momentum == 1.0  # the loss's defaults


def test_summed_sessions_are_the_sessions_counts() -> None:
    """`sum_sessions`: per-position click and view rates; their IPS rates are the mean of c/θ."""
    import torch
    import train_from_clicks

    gen = torch.Generator().manual_seed(0)
    queries, sessions, length = 3, 7, 5
    positions = torch.rand(queries, sessions, length, generator=gen).argsort(-1).argsort(-1)
    positions[0, :, -1] = -1  # an item never shown
    clicks = (torch.rand(queries, sessions, length, generator=gen) < 0.4).float()
    clicks[positions < 0] = 0
    sums = train_from_clicks.sum_sessions(train_from_clicks.ClickLog(positions, clicks), length)
    for q in range(queries):
        for item in range(length):
            for p in range(length):
                at = positions[q, :, item] == p
                assert sums.views[q, item, p] == pytest.approx(float(at.sum()) / sessions)
                expected = float(clicks[q, at, item].sum()) / sessions
                assert sums.clicks[q, item, p] == pytest.approx(expected)
    propensity = train_from_clicks.true_biases(length)
    ips = torch.where(positions >= 0, clicks / propensity[positions.clamp(min=0)], 0).mean(1)
    torch.testing.assert_close(sums.rates(propensity), ips)
    torch.testing.assert_close(sums.rates(), clicks.mean(1))


def test_cross_fitting_makes_every_query_a_test_query_once() -> None:
    """`--folds`: the folds' test queries partition all queries; training never holds them."""
    import torch
    import train_from_clicks
    from ranking_data import PaddedLists

    splits = train_from_clicks.cross_fit_splits(251, 5, seed=3)
    assert len(splits) == 5
    held = torch.cat([test for _, test in splits])
    assert sorted(held.tolist()) == list(range(251))
    for fit, test in splits:
        assert len(fit) + len(test) == 251
        assert not set(fit.tolist()) & set(test.tolist())
    other = train_from_clicks.cross_fit_splits(251, 5, seed=4)[0][1]  # the seed draws the folds
    assert not torch.equal(splits[0][1], other)
    short = PaddedLists(
        torch.ones(2, 3, 4), torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool), None
    )  # type: ignore[arg-type]
    long = PaddedLists(
        torch.ones(1, 5, 4), torch.ones(1, 5), torch.ones(1, 5, dtype=torch.bool), None
    )  # type: ignore[arg-type]
    both = train_from_clicks.concatenate(short, long)
    assert both.features.shape == (3, 5, 4)
    assert both.mask.sum().item() == 2 * 3 + 5  # padding added is not real
    assert both.labels[:2, 3:].abs().sum() == 0
