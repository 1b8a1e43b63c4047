"""``retrieved=``: judged documents a run did not retrieve count in the ideal DCG only.

The same runs through `from_trec` and every entry point (``ndcg``, ``NDCG``, ``retrieval_ndcg``,
``RetrievalNDCG``, under DDP too) against trec_eval's ``ndcg_cut`` written out as a loop
(`tests.references.trec_ndcg_cut`) and, where it installs, pytrec_eval itself.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from tests.references import trec_ndcg_cut
from tests.spawn import run_ranks
from torch_ndcg import NDCG, RetrievalNDCG, dcg, from_trec, ndcg, retrieval_ndcg

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


def random_run(seed: int, queries: int = 20, longest: int = 30) -> tuple[Run, Qrels]:
    """Tie-free runs of 1 to ``longest`` documents, some judged (grades -1..3), some not.

    Plus a run query the qrels do not judge, a qrels query the run does not have, and a query
    with judged documents but none relevant.
    """
    rng = np.random.default_rng(seed)
    run: Run = {"unjudged": {"d0": 1.0}}
    qrels: Qrels = {"unrun": {"d0": 1}}
    for query in range(queries):
        pool = [f"d{doc}" for doc in rng.permutation(2 * longest)[: rng.integers(2, 2 * longest)]]
        judged = [doc for doc in pool if rng.random() < 0.5] or pool[:1]
        qrels[f"q{query}"] = {doc: int(rng.integers(-1, 4)) for doc in judged}
        docs = pool[: rng.integers(1, min(longest, len(pool)) + 1)]
        scores = rng.permutation(len(docs)) + rng.random()  # distinct
        run[f"q{query}"] = dict(zip(docs, scores.tolist(), strict=True))
    qrels["q0"] = dict.fromkeys(qrels["q0"], 0)
    return run, qrels


def per_query(rows: Any, values: torch.Tensor, ids: torch.Tensor) -> dict[str, float]:
    return {rows.query_ids[i]: float(v) for i, v in zip(ids.tolist(), values, strict=True)}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("longest", [6, 30])  # runs shorter than k = 10, and longer
def test_retrieval_ndcg_is_trec_eval_ndcg_cut(seed: int, longest: int) -> None:
    run, qrels = random_run(seed, longest=longest)
    rows = from_trec(run, qrels)
    values, ids = retrieval_ndcg(
        rows.preds, rows.target, rows.indexes, retrieved=rows.retrieved, k=[5, 10], gain="linear"
    )
    for column, k in enumerate([5, 10]):
        expected = trec_ndcg_cut(run, qrels, k)
        got = per_query(rows, values[:, column], ids)
        assert got.keys() == expected.keys()
        assert got == pytest.approx(expected, abs=1e-9)
    # Without `retrieved` the ideal DCG sees the run only: the number the issue reported.
    kept = rows.retrieved
    run_only, _ = retrieval_ndcg(
        rows.preds[kept], rows.target[kept], rows.indexes[kept], k=10, gain="linear"
    )
    assert run_only.ge(values[:, 1] - 1e-12).all()
    assert run_only.gt(values[:, 1]).any()


@pytest.mark.parametrize("longest", [6, 30])
def test_retrieval_ndcg_is_pytrec_eval_ndcg_cut(longest: int) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    for seed in range(3):
        run, qrels = random_run(seed, longest=longest)
        evaluated = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5,10"}).evaluate(run)
        rows = from_trec(run, qrels)
        values, ids = retrieval_ndcg(
            rows.preds,
            rows.target,
            rows.indexes,
            retrieved=rows.retrieved,
            k=[5, 10],
            gain="linear",
        )
        for column, name in enumerate(["ndcg_cut_5", "ndcg_cut_10"]):
            expected = {query: result[name] for query, result in evaluated.items()}
            assert per_query(rows, values[:, column], ids) == pytest.approx(expected, abs=1e-6)


def padded_lists(rows: Any) -> tuple[torch.Tensor, ...]:
    """The rows as ``[Q, L]`` lists: scores, grades, mask, retrieved."""
    queries, width = len(rows.query_ids), int(torch.bincount(rows.indexes).max())
    position = torch.cat([torch.arange(int(n)) for n in torch.bincount(rows.indexes)])
    at = (rows.indexes, position)  # from_trec lists each query's rows together
    preds = torch.zeros(queries, width, dtype=torch.float64).index_put_(at, rows.preds)
    target = torch.zeros(queries, width, dtype=torch.int64).index_put_(at, rows.target)
    mask = torch.zeros(queries, width, dtype=torch.bool).index_put_(at, torch.tensor(True))
    retrieved = torch.zeros(queries, width, dtype=torch.bool).index_put_(at, rows.retrieved)
    return preds, target, mask, retrieved


@pytest.mark.parametrize("validate_args", [True, False])
def test_every_entry_point_gives_the_same_numbers(validate_args: bool) -> None:
    run, qrels = random_run(7, queries=12, longest=15)
    rows = from_trec(run, qrels)
    options: dict[str, Any] = {"k": [3, 10], "gain": "linear", "validate_args": validate_args}
    expected = [trec_ndcg_cut(run, qrels, k) for k in (3, 10)]
    flat = (rows.preds, rows.target, rows.indexes)
    values, ids = retrieval_ndcg(*flat, retrieved=rows.retrieved, **options)
    for column in range(2):
        assert per_query(rows, values[:, column], ids) == pytest.approx(expected[column])
    means = values.mean(0)

    preds, target, mask, retrieved = padded_lists(rows)
    lists = ndcg(preds, target, mask=mask, retrieved=retrieved, **options)
    torch.testing.assert_close(lists, values)
    # Padding marked by ignore_index instead of mask, its retrieved flag False or True alike.
    padded_target = torch.where(mask, target, -1)
    for flags in (retrieved, retrieved | ~mask):
        same = ndcg(preds, padded_target, retrieved=flags, ignore_index=-1, **options)
        torch.testing.assert_close(same, values)
    # A sparse target: the same lists.
    sparse = ndcg(preds, target.to_sparse(), mask=mask, retrieved=retrieved, **options)
    torch.testing.assert_close(sparse, values)

    # The scores of documents not retrieved are never read: the metrics get large ones.
    preds = preds.nan_to_num(1e6)
    flat = (rows.preds.nan_to_num(1e6), rows.target, rows.indexes)
    metric = NDCG(**options)
    half = len(rows.query_ids) // 2
    step = metric(preds[:half], target[:half], mask[:half], retrieved=retrieved[:half])
    torch.testing.assert_close(torch.stack(list(step.values())), values[:half].mean(0).float())
    sparse_half = target[half:].to_sparse()
    metric.update(preds[half:], sparse_half, mask=mask[half:], retrieved=retrieved[half:])
    torch.testing.assert_close(torch.stack(list(metric.compute().values())), means.float())

    stored = RetrievalNDCG(**options)
    cut = rows.preds.numel() // 3
    stored(*(part[:cut] for part in flat), retrieved=rows.retrieved[:cut])
    stored.update(*(part[cut:] for part in flat), retrieved=rows.retrieved[cut:])
    torch.testing.assert_close(torch.stack(list(stored.compute().values())), means.float())
    per_row = RetrievalNDCG(aggregation="none", **options)
    per_row.update(*flat, retrieved=rows.retrieved)
    none_values, none_ids = per_row.compute()
    torch.testing.assert_close(torch.stack(list(none_values.values()), -1), values.float())
    assert torch.equal(none_ids, ids)


def test_what_takes_no_rank_and_what_wins() -> None:
    preds = torch.tensor([[0.9, 0.5, float("nan"), 0.1]])
    target = torch.tensor([[0, 1, 2, 7]])
    retrieved = torch.tensor([[True, True, False, False]])
    mask = torch.tensor([[True, True, True, False]])
    # Item 2 (grade 2) is judged, not retrieved: ideal 2 + 1/log2(3); its NaN score is not read.
    expected = (1 / np.log2(3)) / (2 + 1 / np.log2(3))
    value = ndcg(preds, target, mask=mask, retrieved=retrieved, gain="linear")
    assert float(value) == pytest.approx(expected)
    # The padded item (grade 7) is no judged document, retrieved or not.
    also = ndcg(preds, target, mask=mask, retrieved=retrieved | ~mask, gain="linear")
    assert float(also) == pytest.approx(expected)
    # Not retrieved is no item to leave out: the value differs from masking it.
    masked = ndcg(preds.nan_to_num(), target, mask=retrieved, gain="linear")
    assert float(masked) == pytest.approx(1 / np.log2(3)) != pytest.approx(expected)
    # A NaN score of a retrieved item still raises.
    with pytest.raises(ValueError, match="NaN"):
        ndcg(preds, target, mask=mask, retrieved=mask, gain="linear")
    # Judged documents and none retrieved: 0; none relevant either: empty_target_action.
    nothing = torch.zeros_like(retrieved)
    assert float(ndcg(preds, target, mask=mask, retrieved=nothing)) == 0.0
    zeros = torch.zeros_like(target)
    assert float(ndcg(preds, zeros, mask=mask, retrieved=nothing, empty_target_action="pos")) == 1
    got, ids = retrieval_ndcg(
        preds[0, :3], target[0, :3], torch.tensor([4, 4, 5]), retrieved=retrieved[0, :3]
    )
    assert got.tolist() == pytest.approx([1 / np.log2(3), 0.0])
    assert ids.tolist() == [4, 5]
    # A row of ignore_index is dropped, its retrieved flag whatever it is.
    with_padding = retrieval_ndcg(
        preds[0],
        torch.tensor([0, 1, 2, -1]),
        torch.tensor([4, 4, 4, 4]),
        retrieved=torch.tensor([True, True, False, False]),
        gain="linear",
        ignore_index=-1,
    )
    assert with_padding[0].tolist() == pytest.approx([expected])


def test_an_excluded_relevant_item_stays_an_error() -> None:
    preds = torch.tensor([[0.9, 0.5, 0.1]])
    target = torch.tensor([[0, 1, 2]])
    retrieved = torch.tensor([[True, True, False]])
    with pytest.raises(ValueError, match="both relevant and excluded"):
        ndcg(preds, target, exclude=torch.tensor([[2]]), retrieved=retrieved)
    # An excluded item of grade 0 leaves the list, so the ideal DCG does not change.
    value = ndcg(preds, target, exclude=torch.tensor([[0]]), retrieved=retrieved, gain="linear")
    assert float(value) == pytest.approx(1 / (2 + 1 / np.log2(3)))


def test_retrieved_must_be_a_bool_tensor_of_the_shape_of_preds() -> None:
    preds, target = torch.rand(2, 3), torch.ones(2, 3)
    with pytest.raises(TypeError, match="`retrieved`"):
        ndcg(preds, target, retrieved=torch.ones(2, 3))
    with pytest.raises(ValueError, match="`retrieved`"):
        ndcg(preds, target, retrieved=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="`retrieved`"):
        RetrievalNDCG().update(
            preds.view(-1),
            target.view(-1),
            torch.zeros(6, dtype=torch.long),
            retrieved=torch.ones(5, dtype=torch.bool),
        )


def test_from_trec_maps_string_ids_and_keeps_queries_with_no_relevant_document() -> None:
    run = {"b": {"x": 0.3, "y": 0.7}, "a": {"x": 0.1}, "c": {"z": 1.0}}
    qrels = {"a": {"x": -2, "w": 0}, "b": {"y": 1, "z": 2}}
    rows = from_trec(run, qrels)
    assert rows.query_ids == ["b", "a"]  # the run's order; "c" is not judged: dropped
    assert rows.doc_ids == ["x", "y", "z", "x", "w"]
    assert rows.indexes.tolist() == [0, 0, 0, 1, 1]
    assert rows.target.tolist() == [0, 1, 2, 0, 0]  # -2 counts as 0, unjudged "x" of b 0
    assert rows.retrieved.tolist() == [True, True, False, True, False]
    assert rows.preds[:2].tolist() == [0.3, 0.7]
    assert rows.preds[[2, 4]].isnan().all()
    flat = (rows.preds, rows.target, rows.indexes)
    for action, empty in (("neg", 0.0), ("pos", 1.0)):
        values, ids = retrieval_ndcg(
            *flat, retrieved=rows.retrieved, gain="linear", empty_target_action=action
        )
        assert per_query(rows, values, ids)["a"] == empty
    skipped, ids = retrieval_ndcg(*flat, retrieved=rows.retrieved, empty_target_action="skip")
    assert np.isnan(per_query(rows, skipped, ids)["a"])


def test_from_trec_reads_trec_files(tmp_path: Path) -> None:
    run, qrels = random_run(3, queries=5)
    run_file, qrels_file = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run_lines = [
        f"{query} Q0 {doc} {rank} {score!r} tag"
        for query, scores in run.items()
        for rank, (doc, score) in enumerate(scores.items(), 1)
    ]
    run_file.write_text("\n".join(run_lines) + "\n")
    qrels_file.write_text(
        "".join(
            f"{query} 0 {doc} {grade}\n"
            for query, grades in qrels.items()
            for doc, grade in grades.items()
        )
    )
    from_files, from_tables = from_trec(run_file, str(qrels_file)), from_trec(run, qrels)
    for got, expected in zip(from_files, from_tables, strict=True):
        if isinstance(got, torch.Tensor):
            torch.testing.assert_close(got, expected, equal_nan=True)
        else:
            assert got == expected
    run_file.write_text(run_lines[0] + "\n" + run_lines[0] + "\n")
    with pytest.raises(ValueError, match="once per query"):
        from_trec(run_file, qrels)
    run_file.write_text("q1 Q0 d1 0.5 tag\n")
    with pytest.raises(ValueError, match="6 columns"):
        from_trec(run_file, qrels)


@pytest.mark.parametrize(
    ("run_line", "qrels_line", "found"),
    [
        ("q1 Q0 d1 1 high tag", "q1 0 d1 1", "a score in the run file .* line 1 is"),
        ("q1 Q0 d1 1 0.5 tag", "q1 0 d1 1.5", "an integer grade in the qrels file .* line 1"),
    ],
)
def test_from_trec_names_the_line_of_a_value_that_is_not_a_number(
    tmp_path: Path, run_line: str, qrels_line: str, found: str
) -> None:
    # Before: Python's bare "could not convert string to float: 'high'", no file, no line.
    run_file, qrels_file = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run_file.write_text(run_line + "\n")
    qrels_file.write_text(qrels_line + "\n")
    with pytest.raises(ValueError, match=f"Expected {found}"):
        from_trec(run_file, qrels_file)


def _ddp_worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(60))
    rows = from_trec(*random_run(5, queries=16, longest=15))
    metric = RetrievalNDCG(k=[3, 10], gain="linear")
    mine = slice(rank, None, 2)  # every query split between the ranks
    metric.update(rows.preds[mine], rows.target[mine], rows.indexes[mine], rows.retrieved[mine])
    torch.save({k: v for k, v in metric.compute().items()}, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def test_under_ddp_every_rank_gets_the_value_of_one_process(tmp_path: Path) -> None:
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("needs torch.distributed with gloo")
    run, qrels = random_run(5, queries=16, longest=15)
    expected = [np.mean(list(trec_ndcg_cut(run, qrels, k).values())) for k in (3, 10)]
    for result in run_ranks(_ddp_worker, 2, tmp_path):
        got = [float(result["ndcg@3"]), float(result["ndcg@10"])]
        assert got == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("shape", "labels", "gain"),
    [
        ((4, 20), "int", "exponential"),  # a small batch
        ((64, 200), "int", "exponential"),  # the ideal DCG from label counts
        ((64, 200), "float", "linear"),  # from sorted labels
        ((4, 20), "int", "callable"),
        ((64, 200), "int", "callable"),
        ((2, 20_000), "int", "linear"),  # long rows
    ],
)
@pytest.mark.parametrize("ties", ["average", "first"])
def test_ndcg_is_the_dcg_of_the_retrieved_over_the_ideal_dcg_of_the_judged(
    shape: tuple[int, int], labels: str, gain: Any, ties: str
) -> None:
    gen = torch.Generator().manual_seed(shape[1])
    relevant = torch.rand(shape, generator=gen) < 20 / shape[1]  # about 20 a list
    target = torch.randint(1, 5, shape, generator=gen) * relevant
    preds = torch.randint(0, 50, shape, generator=gen) + 20.0 * target  # ties, found
    if labels == "float":
        target = target * torch.rand(shape, generator=gen)
    gain = (lambda y: y * y) if gain == "callable" else gain
    mask = torch.rand(shape, generator=gen) < 0.9
    retrieved = torch.rand(shape, generator=gen) < 0.3
    retrieved[0] = False  # a list with nothing retrieved
    target = torch.where(retrieved, target.clamp(max=3), target)  # the top grade: not retrieved
    options: dict[str, Any] = {"k": [1, 10], "gain": gain, "ties": ties}
    run = dcg(preds, target, mask=mask & retrieved, **options)
    ideal = dcg(target.double(), target, mask=mask, **options)
    expected = torch.where(ideal > 0, run / ideal, 0).float()
    scores = preds.masked_fill(~retrieved, torch.nan)
    for validate_args in (True, False):
        got = ndcg(
            scores, target, mask=mask, retrieved=retrieved, validate_args=validate_args, **options
        )
        torch.testing.assert_close(got, expected)
    assert got[0].eq(0).all()


def test_a_metric_collection_passes_retrieved_to_both_metrics() -> None:
    # torchmetrics hands every keyword to every metric of a collection (filtered by signature):
    # NDCG (one list) and RetrievalNDCG (one query) agree with the functional value.
    from torchmetrics import MetricCollection

    preds = torch.tensor([0.9, 0.5, float("nan")])
    target, retrieved = torch.tensor([0, 1, 2]), torch.tensor([True, True, False])
    indexes = torch.zeros(3, dtype=torch.int64)
    expected = ndcg(preds, target, retrieved=retrieved, gain="linear")
    collection = MetricCollection(
        {"lists": NDCG(gain="linear"), "rows": RetrievalNDCG(gain="linear")}
    )
    forward = collection(preds, target, indexes=indexes, retrieved=retrieved)
    for value in (*forward.values(), *collection.compute().values()):
        torch.testing.assert_close(value, expected.float())
