"""Where users' own data comes in: TREC runs and qrels, padded lists, catalog item ids.

`from_trec(..., trec_eval_ties=True)` against pytrec_eval and a loop written from trec_eval's
ranking rule (float32 scores, ties by docno descending) on runs full of ties; queries without
judgments; the errors of tables and slots that name what was given; `pad_by_query`'s default
padding, which the metrics refuse without a mask; `item_offset` without a process group.
"""

from __future__ import annotations

import math
import string
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import torch

from torch_ndcg import (
    NDCG,
    LambdaRankLoss,
    RetrievalNDCG,
    from_trec,
    ndcg,
    pad_by_query,
    retrieval_ndcg,
    unpad_by_query,
)
from torch_ndcg.functional import catalog_ndcg

Ties = Literal["average", "first"]
TIES: tuple[Ties, ...] = ("average", "first")
Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

# Scores that tie often: equal ones, and different float64 values of one float32 value
# (six decimals near 25, 1 + 2^-30 and 1, values that overflow or underflow float32).
TIED_SCORES = [
    25.123456,
    25.123455,
    25.1234555,
    1.0,
    1.0 + 2.0**-30,
    0.5,
    0.0,
    -0.0,
    1e-46,
    2e-46,
    -3.0,
    1e39,
    1e40,
    -1e39,
    -1e40,
    math.inf,
    -math.inf,
]


def as_float32(score: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.array([score]).astype(np.float32)[0])


def trec_eval_ndcg(run: Run, qrels: Qrels, k: int | None) -> dict[str, float]:
    """trec_eval's ``ndcg_cut.k`` (``ndcg`` for ``k=None``), written out as loops.

    A query of the run with a judged document is scored; its documents are ranked by their
    score as a float32, descending, then by docno, descending; gains are the grades (negative:
    0), over the ideal DCG of every judged grade.
    """
    values = {}
    for query, scores in run.items():
        grades = qrels.get(query)
        if not grades:
            continue
        ranked = sorted(scores, key=lambda doc: (as_float32(scores[doc]), doc), reverse=True)
        ideal_grades = sorted((max(g, 0) for g in grades.values()), reverse=True)
        cut = len(ranked) if k is None else k
        dcg = sum(
            max(grades.get(doc, 0), 0) / math.log2(r + 2) for r, doc in enumerate(ranked[:cut])
        )
        cut = len(ideal_grades) if k is None else k
        ideal = sum(g / math.log2(r + 2) for r, g in enumerate(ideal_grades[:cut]))
        values[query] = dcg / ideal if ideal > 0 else 0.0
    return values


def tied_run(seed: int, queries: int = 25) -> tuple[Run, Qrels]:
    """Runs whose scores come from `TIED_SCORES`, docnos of mixed case, grades -1..3."""
    rng = np.random.default_rng(seed)
    run: Run = {}
    qrels: Qrels = {}
    letters = list("aAbB" + string.digits[:3])
    for query in range(queries):
        size = int(rng.integers(1, 25))
        docs = sorted({"".join(rng.choice(letters, 3)) for _ in range(size)})
        docs = [docs[i] for i in rng.permutation(len(docs))]
        retrieved = docs[: max(1, int(rng.integers(1, len(docs) + 1)))]
        pool = [TIED_SCORES[i] for i in rng.choice(len(TIED_SCORES), 4)]  # few values: ties
        run[f"q{query}"] = {doc: pool[int(rng.integers(0, 4))] for doc in retrieved}
        judged = [doc for doc in docs if rng.random() < 0.6] or docs[:1]
        qrels[f"q{query}"] = {doc: int(rng.integers(-1, 4)) for doc in judged}
    return run, qrels


def per_query(rows: Any, values: torch.Tensor, ids: torch.Tensor) -> dict[str, float]:
    return {rows.query_ids[i]: float(v) for i, v in zip(ids.tolist(), values, strict=True)}


def scored(rows: Any, k: Any, ties: Ties) -> tuple[torch.Tensor, torch.Tensor]:
    return retrieval_ndcg(
        rows.preds,
        rows.target,
        rows.indexes,
        retrieved=rows.retrieved,
        k=k,
        gain="linear",
        ties=ties,
    )


# --- trec_eval's ties --------------------------------------------------------------------------


def test_scores_equal_as_float32_rank_by_docno_descending_with_trec_eval_ties() -> None:
    run = {"q": {"dA": 25.123456, "dB": 25.123455}}
    qrels = {"q": {"dA": 0, "dB": 1}}
    rows = from_trec(run, qrels, trec_eval_ties=True)
    for ties in TIES:
        values, _ = scored(rows, 1, ties)
        assert values.tolist() == [1.0]  # dB (docno descending) first, as trec_eval
    assert rows.preds.tolist() == [-2.0, -1.0]  # minus the ranks of trec_eval's ranking
    default, _ = scored(from_trec(run, qrels), 1, "average")
    assert default.tolist() == [0.0]  # the run's float64 scores: dA is ahead
    pytrec_eval = pytest.importorskip("pytrec_eval")
    evaluated = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1"}).evaluate(run)
    assert evaluated["q"]["ndcg_cut_1"] == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_trec_eval_ties_give_trec_evals_number_on_runs_full_of_ties(seed: int) -> None:
    run, qrels = tied_run(seed)
    rows = from_trec(run, qrels, trec_eval_ties=True)
    cutoffs = [1, 3, 5, 10]
    for ties in TIES:
        values, ids = scored(rows, cutoffs, ties)
        for column, k in enumerate(cutoffs):
            expected = trec_eval_ndcg(run, qrels, k)
            assert per_query(rows, values[:, column], ids) == pytest.approx(expected, abs=1e-12)
        whole, ids = scored(rows, None, ties)
        assert per_query(rows, whole, ids) == pytest.approx(
            trec_eval_ndcg(run, qrels, None), abs=1e-12
        )
    # The runs are full of ties: the library's own conventions give other numbers there.
    default = from_trec(run, qrels)
    values, ids = scored(default, 10, "average")
    expected = trec_eval_ndcg(run, qrels, 10)
    assert sum(abs(v - expected[q]) > 1e-9 for q, v in per_query(default, values, ids).items()) > 5
    # The metric takes the same rows (stored and reported in float32).
    metric = RetrievalNDCG(k=cutoffs, gain="linear")
    metric.update(rows.preds, rows.target, rows.indexes, rows.retrieved)
    means = metric.compute()
    for k in cutoffs:
        mean = np.mean(list(trec_eval_ndcg(run, qrels, k).values()))
        assert float(means[f"ndcg@{k}"]) == pytest.approx(mean, abs=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_trec_eval_ties_are_pytrec_evals_number(seed: int) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = tied_run(seed)
    evaluated = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1,3,5,10", "ndcg"}).evaluate(run)
    rows = from_trec(run, qrels, trec_eval_ties=True)
    for ties in TIES:
        values, ids = scored(rows, [1, 3, 5, 10], ties)
        for column, name in enumerate(["ndcg_cut_1", "ndcg_cut_3", "ndcg_cut_5", "ndcg_cut_10"]):
            expected = {query: result[name] for query, result in evaluated.items()}
            assert per_query(rows, values[:, column], ids) == pytest.approx(expected, abs=1e-12)
        whole, ids = scored(rows, None, ties)
        expected = {query: result["ndcg"] for query, result in evaluated.items()}
        assert per_query(rows, whole, ids) == pytest.approx(expected, abs=1e-12)


def test_trec_eval_ties_must_be_a_bool_and_numpy_numbers_are_taken() -> None:
    with pytest.raises(TypeError, match="`trec_eval_ties` to be a bool"):
        from_trec({"q": {"d": 1.0}}, {"q": {"d": 1}}, trec_eval_ties="yes")  # type: ignore[arg-type]
    # Integer scores and numpy numbers are numbers, as pytrec_eval takes them.
    run: Any = {"q": {"d": 2, "e": np.float32(0.5)}}
    qrels: Any = {"q": {"d": np.int64(1)}}
    rows = from_trec(run, qrels, trec_eval_ties=True)
    assert rows.target.tolist() == [1, 0]
    assert rows.preds.tolist() == [-1.0, -2.0]
    assert from_trec(run, qrels).preds.tolist() == [2.0, 0.5]


# --- queries from_trec scores --------------------------------------------------------------------


def test_a_query_without_judgments_is_not_evaluated() -> None:
    run = {"q": {"a": 1.0}, "r": {"a": 1.0}}
    qrels: Qrels = {"q": {}, "r": {"a": 1}}
    rows = from_trec(run, qrels)
    assert rows.query_ids == ["r"]
    values, _ = scored(rows, None, "average")
    assert values.tolist() == [1.0]
    pytrec_eval = pytest.importorskip("pytrec_eval")
    assert pytrec_eval.RelevanceEvaluator(qrels, {"ndcg"}).evaluate(run) == {"r": {"ndcg": 1.0}}


@pytest.mark.parametrize(
    ("run", "qrels"),
    [
        ({"q1": {"d": 1.0}, "q2": {"d": 1.0}}, {"x1": {"d": 1}}),
        ({"q1": {"d": 1.0}}, {"q1": {}, "x2": {"d": 1}}),  # shared, but not judged
        ({}, {"x1": {"d": 1}}),
    ],
)
def test_a_run_and_qrels_with_no_query_in_common_say_so(run: Run, qrels: Qrels) -> None:
    with pytest.raises(ValueError, match="the run and the qrels to share a query") as error:
        from_trec(run, qrels)
    assert "'x" in str(error.value)  # the qrels' ids are shown


def test_many_query_ids_are_shortened_in_the_message() -> None:
    run = {f"q{i}": {"d": 1.0} for i in range(10)}
    with pytest.raises(ValueError, match=r"\['q0', 'q1', 'q2'\] \.\.\. \(10\).*\['x'\] \(1\)"):
        from_trec(run, {"x": {"d": 1}})


# --- errors that name the argument ---------------------------------------------------------------


def test_rows_of_from_trec_without_retrieved_point_to_it() -> None:
    rows = from_trec({"q": {"d1": 0.9, "d2": 0.5}}, {"q": {"d2": 1, "d3": 2}})
    hint = r"retrieved=rows\.retrieved"
    with pytest.raises(ValueError, match=hint):
        retrieval_ndcg(rows.preds, rows.target, rows.indexes, k=2)
    with pytest.raises(ValueError, match=hint):
        RetrievalNDCG(k=2).update(rows.preds, rows.target, rows.indexes)
    with pytest.raises(ValueError, match=hint):
        ndcg(rows.preds, rows.target, k=2)
    values, _ = retrieval_ndcg(rows.preds, rows.target, rows.indexes, retrieved=rows.retrieved)
    assert values.isfinite().all()


@pytest.mark.parametrize(
    ("run", "qrels", "error", "message"),
    [
        (
            {"q": {"d": 0.5}},
            {"q": {"d": "1"}},
            TypeError,
            r"grade in `qrels` to be a real number, but query 'q' gives document 'd' '1' \(str\)",
        ),
        (
            {"q": {"d": 0.5}},
            {"q": {"d": math.nan}},
            ValueError,
            r"`qrels` grades without NaN, but query 'q' gives document 'd' NaN",
        ),
        (
            {"q": {"d": "high"}},
            {"q": {"d": 1}},
            TypeError,
            r"score in `run` to be a real number, but query 'q' gives document 'd' 'high'",
        ),
        (
            {"q": {"d": math.nan}},
            {"q": {"d": 1}},
            ValueError,
            r"`run` scores without NaN, but query 'q' gives document 'd' NaN",
        ),
        ({"q": [("d", 0.5)]}, {"q": {"d": 1}}, TypeError, r"`run` as \{query: \{doc: score\}\}"),
        ([("q", "d", 0.5)], {"q": {"d": 1}}, TypeError, r"`run` as .* or the path of a TREC"),
    ],
)
def test_tables_of_other_values_are_named(
    run: Any, qrels: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        from_trec(run, qrels)


def test_grades_of_integer_value_are_taken_and_fractional_ones_named() -> None:
    """Grades as JSON and pandas give them (1.0) and numpy's integers are grades; a fractional
    grade, which the integer labels would truncate, is named."""
    rows = from_trec({"q": {"a": 0.5, "b": 0.2}}, {"q": {"a": 1.0, "b": np.int64(2)}})
    assert rows.target.tolist() == [1, 2]
    message = r"integer grades in `qrels` \(int64 ones\), as trec_eval reads them, but query 'q'"
    with pytest.raises(ValueError, match=message + r" gives .* 1\.5"):
        from_trec({"q": {"a": 0.5}}, {"q": {"a": 1.5}})
    with pytest.raises(ValueError, match=message + r" gives .* 100000000000000000000"):
        from_trec({"q": {"a": 0.5}}, {"q": {"a": 10**20}})
    # Past any float too: named as well, and shortened.
    with pytest.raises(ValueError, match=message + r" gives .*'a' 1000+\.\.\.0+\.$"):
        from_trec({"q": {"a": 0.5}}, {"q": {"a": 10**400}})


def test_a_run_score_past_any_float_is_named() -> None:
    message = r"`run` scores that a float64 holds, but query 'q' gives document 'a' 1000"
    with pytest.raises(ValueError, match=message):
        from_trec({"q": {"a": 10**400, "b": 1}}, {"q": {"a": 1}})
    # An int that rounds to the largest float64 is one.
    largest = int(sys.float_info.max) + 2**969
    rows = from_trec({"q": {"a": largest, "b": 1}}, {"q": {"a": 1}})
    assert rows.preds.tolist() == [sys.float_info.max, 1.0]


def test_a_qrels_files_grades_are_read_as_its_tables_are(tmp_path: Path) -> None:
    """``1.0`` in a qrels file is grade 1, as in a table; a grade past int64 is named."""
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run.write_text("q Q0 a 1 0.5 tag\nq Q0 b 2 0.2 tag\n")
    qrels.write_text("q 0 a 1.0\nq 0 b 2\n")
    assert from_trec(run, qrels).target.tolist() == [1, 2]
    qrels.write_text("q 0 a 100000000000000000000\n")
    with pytest.raises(ValueError, match=r"\(int64 ones\).* 100000000000000000000"):
        from_trec(run, qrels)
    qrels.write_text("q 0 a 1\nq 0 b " + "9" * 400 + "\n")
    with pytest.raises(ValueError, match=r"\(int64 ones\).* 'b' 9999"):
        from_trec(run, qrels)
    for grade in ("1e3", "2e0", "1_0", "\u0663", "0x1"):  # trec_eval reads 1, 2, 1, 0, 0
        qrels.write_text(f"q 0 a {grade}\n")
        message = f"an integer grade in the qrels file .* 'q 0 a {grade}'"
        with pytest.raises(ValueError, match=message):
            from_trec(run, qrels)
    qrels.write_text("q 0 a -0\nq 0 b +2.00\n")
    assert from_trec(run, qrels).target.tolist() == [0, 2]


def test_unpad_by_query_names_slots_outside_the_lists() -> None:
    padded = torch.arange(6.0).view(2, 3)
    message = r"`slots` in \[0, 6\) .* but got 2 outside: \[-1, 99\]"
    with pytest.raises(ValueError, match=message):
        unpad_by_query(padded, torch.tensor([0, -1, 1, 99]))
    with pytest.raises(ValueError, match=r"`slots` in \[0, 6\)"):
        unpad_by_query(padded, torch.tensor([0, 1, 99], dtype=torch.int16))
    assert unpad_by_query(padded, torch.tensor([5, 0])).tolist() == [5.0, 0.0]


# --- pad_by_query's default padding ------------------------------------------------------------


def flat_ndcg_at(k: int, preds: list[float], labels: list[int], qid: list[int]) -> list[float]:
    """Exponential-gain nDCG@k of each query (ascending ids), from its real rows (a loop)."""
    values = []
    for query in sorted(set(qid)):
        rows = [(p, y) for p, y, q in zip(preds, labels, qid, strict=True) if q == query]
        ranked = [y for _, y in sorted(rows, key=lambda row: -row[0])]  # tie-free scores
        ideal = sorted((y for _, y in rows), reverse=True)
        dcg = sum((2**y - 1) / math.log2(r + 2) for r, y in enumerate(ranked[:k]))
        best = sum((2**y - 1) / math.log2(r + 2) for r, y in enumerate(ideal[:k]))
        values.append(dcg / best if best else 0.0)
    return values


def test_padded_labels_without_a_mask_are_an_error_not_a_number() -> None:
    generator = torch.Generator().manual_seed(3)
    qid = torch.randint(0, 6, (60,), generator=generator)
    scores = torch.rand(60, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 3, (60,), generator=generator)
    features = torch.rand(60, 4, generator=generator)
    (preds, target, padded_features), mask, _, _ = pad_by_query(qid, scores, labels, features)
    assert not mask.all()  # the queries have different sizes: there is padding
    expected = torch.tensor(flat_ndcg_at(3, scores.tolist(), labels.tolist(), qid.tolist()))
    torch.testing.assert_close(ndcg(preds, target, k=3, mask=mask), expected.to(preds.dtype))
    torch.testing.assert_close(ndcg(preds, target, k=3, ignore_index=-1), expected.to(preds.dtype))
    message = r"non-negative, but found the value -1(\.0)? .*`mask` or pass `ignore_index`=-1"
    with pytest.raises(ValueError, match=message):
        ndcg(preds, target, k=3)
    with pytest.raises(ValueError, match=message):
        NDCG(k=3).update(preds, target)
    with pytest.raises(ValueError, match=message):
        LambdaRankLoss()(preds, target)
    with pytest.raises(ValueError, match=message):
        ndcg(preds, target.float(), k=3)  # float labels (as svmlight files give) too
    assert padded_features[~mask].eq(-1).all()


def test_default_padding_per_dtype_and_an_explicit_padding_value() -> None:
    """-1 where the dtype holds it; unsigned and bool values, whose padding would read as label
    0, need an explicit padding value (before: 0, silently scored without the mask)."""
    qid = torch.tensor([1, 0, 1])
    signed = (torch.tensor([0.5, 0.25, 0.75]), torch.tensor([2, 1, 0], dtype=torch.int8))
    unsigned = (torch.tensor([3, 4, 5], dtype=torch.uint8), torch.tensor([True, True, True]))
    padded, mask, _, _ = pad_by_query(qid, *signed)
    assert mask.tolist() == [[True, False], [True, True]]
    assert [value[0, 1].item() for value in padded] == [-1.0, -1]
    for value, dtype in zip(unsigned, ["torch.uint8", "torch.bool"], strict=True):
        message = rf"`values\[1\]` of a dtype that holds the default padding -1, but got {dtype}"
        with pytest.raises(ValueError, match=message):
            pad_by_query(qid, signed[0], value)
    explicit, _, _, _ = pad_by_query(qid, *signed, *unsigned, padding_value=0)
    assert [value[0, 1].item() for value in explicit] == [0.0, 0, 0, False]


# --- catalog ids ----------------------------------------------------------------------------------


def test_item_offset_without_a_process_group_is_refused() -> None:
    generator = torch.Generator().manual_seed(0)
    queries, items = torch.rand(3, 4, generator=generator), torch.rand(10, 4, generator=generator)
    relevant = torch.tensor([[0, 2], [5, -1], [9, 1]])
    message = r"`item_offset` 0 without `process_group` .* but got 7"
    for ids in (relevant, relevant + 7):
        with pytest.raises(ValueError, match=message):
            catalog_ndcg(queries, items, ids, k=3, item_offset=7)
        with pytest.raises(ValueError, match=message):
            NDCG(k=3).update_catalog(queries, items, ids, item_offset=7)
    dense = torch.zeros(3, 10).scatter_(1, relevant.clamp(min=0), (relevant >= 0).float())
    torch.testing.assert_close(
        catalog_ndcg(queries, items, relevant, k=3, item_offset=0),
        ndcg(queries @ items.T, dense, k=3),
    )
