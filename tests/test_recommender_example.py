"""examples/recommender_full_catalog.py: its reader (u.data, .inter), its split, a short run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.references import catalog_ndcg_one_user


def test_both_formats_read_the_same(tmp_path: Path) -> None:
    import recommender_full_catalog as example

    data = example.write_generated(tmp_path / "u.data", users=30, items=40)
    inter = example.write_generated(tmp_path / "x.inter", users=30, items=40)
    assert not data.read_text().startswith("user_id")
    assert inter.read_text().startswith("user_id:token\titem_id:token\trating:float")
    rows = example.read_interactions(data)
    assert rows == example.read_interactions(inter)
    assert len(rows) == len(data.read_text().splitlines())


def test_reader_fields_duplicates_and_split(tmp_path: Path) -> None:
    """Fields by name in any order; a repeated pair keeps its first time; leave-last-out."""
    import recommender_full_catalog as example

    inter = tmp_path / "a.inter"
    inter.write_text(
        "item_id:token\ttimestamp:float\tuser_id:token\n"
        "a\t5\tu\nb\t1\tu\nc\t3\tu\na\t0\tv\nb\t9\tu\nd\t2\tv\ne\t4\tu\n"
    )
    rows = example.read_interactions(inter)
    assert rows[0] == ("u", "a", 5.0)
    split = example.split_interactions(rows, "loo")
    # items a0 b1 c2 d3 e4; u: b@1 (its repeat at 9 dropped), c@3, e@4, a@5;
    # v has 2 items: training only
    assert (split.n_users, split.n_items) == (2, 5)
    assert (split.train, split.valid, split.test) == ([[1, 2], [0, 3]], [[4], []], [[0], []])
    test_users, relevant, seen = split.eval_set("test").tensors
    assert test_users.tolist() == [0]
    assert relevant.tolist() == [[0]]
    assert seen.tolist() == [[1, 2, 4]]
    ratio = example.split_interactions([("u", str(i), float(-i)) for i in range(20)], "ratio")
    # 20 items: 16 training, 2 validation, 2 test; time runs backwards here (timestamp -i)
    assert (ratio.train[0], ratio.valid[0], ratio.test[0]) == (
        list(range(19, 3, -1)),
        [3, 2],
        [1, 0],
    )


def test_run_matches_a_loop_reference_and_recbole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import recommender_full_catalog as example

    path = example.write_generated(tmp_path / "g.inter", users=40, items=60)
    before = torch.get_num_threads()
    try:
        result = example.main(["--data", str(path), "--epochs", "2", "--threads", "1"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    out = capsys.readouterr().out
    for epoch in (1, 2):
        assert f"epoch {epoch}: train BPR loss " in out
    assert len(result["valid"]) == 2
    assert "test nDCG@10, torch_ndcg NDCG.update_catalog: " in out
    model, data = result["model"], result["data"]
    with torch.no_grad():
        scores = (model.users.weight @ model.items.weight.T).tolist()
    expected = [
        catalog_ndcg_one_user(
            scores[u],
            range(data.n_items),
            {data.test[u][0]: 1.0},
            set(data.train[u] + data.valid[u]),
            10,
        )
        for u in range(data.n_users)
        if data.test[u]
    ]
    assert result["test"] == pytest.approx(sum(expected) / len(expected), abs=1e-6)
    if result["recbole"] is None:
        assert "RecBole's evaluator: skipped" in out
    else:
        assert result["recbole"] == pytest.approx(result["test"], abs=1e-6)
        assert "RecBole 1.2.1 evaluator on the same scores" in out
