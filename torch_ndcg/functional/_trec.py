"""A run and its qrels (trec_eval, pytrec_eval, ranx) as the flat rows of `retrieval_ndcg`."""

import os
import re
from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import Tensor

from torch_ndcg import _validation

__all__ = ["TrecRows", "from_trec"]

Table = Mapping[str, Mapping[str, float]]


class TrecRows(NamedTuple):
    """Flat rows of a run and its qrels (see `from_trec`).

    Attributes:
        preds: ``[N]`` float64 run scores (with ``trec_eval_ties``, minus the ranks of
            trec_eval's ranking), NaN on judged documents the run did not retrieve.
        target: ``[N]`` qrels grades (negative ones as 0; 0 for unjudged documents).
        indexes: ``[N]`` int64 query codes: row ``i`` belongs to ``query_ids[indexes[i]]``.
        retrieved: ``[N]`` bool, ``False`` on judged documents the run did not retrieve.
        query_ids: the run's query ids that the qrels judge (with at least one judged
            document), in the run's order.
        doc_ids: the document id of each row.
    """

    preds: Tensor
    target: Tensor
    indexes: Tensor
    retrieved: Tensor
    query_ids: list[str]
    doc_ids: list[str]


def _read(source: Table | str | os.PathLike[str], run: bool) -> Table:
    """A table as given, or read from a TREC run or qrels file (see `from_trec`)."""
    if isinstance(source, Mapping):
        return source
    table: dict[str, dict[str, float]] = {}
    kind, columns = ("run", 6) if run else ("qrels", 4)
    with open(source) as lines:
        for number, line in enumerate(lines, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != columns:
                raise ValueError(
                    f"Expected {columns} columns in the {kind} file {source}, but line {number} "
                    f"has {len(fields)}: {line.strip()!r}."
                )
            docs = table.setdefault(fields[0], {})
            if fields[2] in docs:
                raise ValueError(
                    f"Expected each document once per query in the {kind} file {source}, but "
                    f"line {number} lists {fields[2]!r} again for query {fields[0]!r}."
                )
            try:
                docs[fields[2]] = float(fields[4]) if run else _grade(fields[3])
            except ValueError:
                raise ValueError(
                    f"Expected {'a score' if run else 'an integer grade'} in the {kind} file "
                    f"{source}, but line {number} is {line.strip()!r}."
                ) from None
    return table


def _grade(text: str) -> int:
    """A qrels file's grade: an integer, or a float of integer value (``1.0``), as in a table.

    Only ASCII digits, with an optional sign and zero decimals: trec_eval reads the leading
    digits (``1e3`` and ``1_0`` as 1), so any other form is refused, not guessed.
    """
    if re.fullmatch(r"[+-]?[0-9]+(\.0*)?", text) is None:
        raise ValueError(f"not an integer grade: {text!r}")
    return int(text.split(".")[0])


def _trec_eval_ranks(scores: list[float], docs: list[str]) -> list[float]:
    """Minus the rank (-1 for the first) of each of a query's documents in trec_eval's ranking.

    trec_eval holds a score as a float32 and ranks by it, descending, then by document id,
    descending (in byte order: Python's order of ``str``).
    """
    single = torch.tensor(scores, dtype=torch.float64).float().tolist()  # float32, as floats
    order = sorted(range(len(docs)), key=lambda i: (single[i], str(docs[i])), reverse=True)
    ranks = [0.0] * len(docs)
    for rank, i in enumerate(order, 1):
        ranks[i] = -float(rank)
    return ranks


def from_trec(
    run: Table | str | os.PathLike[str],
    qrels: Table | str | os.PathLike[str],
    *,
    trec_eval_ties: bool = False,
) -> TrecRows:
    r"""Flat rows for `retrieval_ndcg` from a run and its qrels, trec_eval's way.

    For each query of the run that the qrels judge, a row per retrieved document (its score, its
    grade or 0) and a row per judged document the run did not retrieve (``retrieved`` False,
    score NaN): in the ideal DCG only. ``gain="linear"`` then gives trec_eval's ``ndcg_cut.k``

    $$
    \mathrm{nDCG@}k(q) = \frac{\sum_{r \le k} y_{\pi(r)} / \log_2(1 + r)}
        {\sum_{r \le k} y^*_{(r)} / \log_2(1 + r)}
    $$

    with $\pi$ the run's ranking and $y^*$ every judged grade of $q$, sorted: trec_eval's number
    on every run with ``trec_eval_ties=True``; by default, on runs where no two scores of a
    query are equal as float32. As trec_eval and pytrec_eval: negative grades count as 0, a run
    query absent from the qrels or without a judged document is dropped (and a qrels query
    absent from the run is not scored; for trec_eval's ``-c`` give it an empty run), a query
    with no relevant document is kept (``empty_target_action`` decides).

    Args:
        run: ``{query: {doc: score}}`` (as pytrec_eval and ranx take it) or the path of a TREC
            run file (``qid Q0 docno rank score tag``; the rank column is not read).
        qrels: ``{query: {doc: grade}}`` (integer grades that fit an int64; ``1.0`` is one,
            in a file too) or the path of a TREC qrels file (``qid iteration docno grade``).

    Keyword Args:
        trec_eval_ties: rank as trec_eval does, ties included: each retrieved document's
            ``preds`` is minus its rank (-1, -2, ...) in trec_eval's ranking, by the score as
            trec_eval holds it (a float32), descending, then by document id, descending. No
            two are tied: every ``ties``, and `RetrievalNDCG`'s float32 rows, give trec_eval's
            number. Default ``False``: the run's scores as given (float64), whose ties
            ``ties`` settles (by default averaged, whatever the documents' ids).

    Returns:
        A `TrecRows`: ``preds``, ``target``, ``indexes``, ``retrieved``, and the string ids
        (query ``ids[j]`` of `retrieval_ndcg`'s result is ``query_ids[ids[j]]``).

    Raises:
        ValueError: a file line without its columns, or whose score (run) or integer grade
            (qrels) is not a number; a document listed twice for a query; a NaN score or
            grade; a fractional grade or one past int64; a run and qrels that share no judged query.
        TypeError: a score or grade that is not a real number, a table that is not
            ``{query: {doc: value}}``, ``trec_eval_ties`` not a bool.

    Example:
        Query q1 retrieves d1 (grade 0) above d2 (grade 1); d3 (grade 2) is judged, not
        retrieved: DCG $1/\log_2 3$, ideal DCG $2 + 1/\log_2 3$. Query q9 is not judged.

        >>> from torch_ndcg import from_trec, retrieval_ndcg
        >>> run = {"q1": {"d1": 0.9, "d2": 0.5}, "q9": {"d1": 1.0}}
        >>> qrels = {"q1": {"d2": 1, "d3": 2}}
        >>> rows = from_trec(run, qrels)
        >>> rows.doc_ids, rows.retrieved
        (['d1', 'd2', 'd3'], tensor([ True,  True, False]))
        >>> values, ids = retrieval_ndcg(
        ...     rows.preds, rows.target, rows.indexes, retrieved=rows.retrieved, gain="linear"
        ... )
        >>> values, [rows.query_ids[i] for i in ids]
        (tensor([0.2398], dtype=torch.float64), ['q1'])

        Scores equal as float32 are tied for trec_eval, which ranks d2 (docno descending) first:

        >>> run = {"q1": {"d1": 25.123456, "d2": 25.123455}}
        >>> rows = from_trec(run, qrels, trec_eval_ties=True)
        >>> rows.preds  # minus the ranks: d2 first
        tensor([-2., -1., nan], dtype=torch.float64)
        >>> retrieval_ndcg(
        ...     rows.preds, rows.target, rows.indexes, retrieved=rows.retrieved, k=1,
        ...     gain="linear",
        ... )[0]
        tensor([0.5000], dtype=torch.float64)
    """
    _validation.check_bool("trec_eval_ties", trec_eval_ties)
    _validation.check_trec_source("run", run)
    _validation.check_trec_source("qrels", qrels)
    run, qrels = _read(run, True), _read(qrels, False)
    _validation.check_trec_tables(run, qrels)
    query_ids = [query for query in run if qrels.get(query)]  # judged: a document at least
    _validation.check_shared_queries(query_ids, run, qrels)
    preds: list[float] = []
    target: list[float] = []
    indexes: list[int] = []
    doc_ids: list[str] = []
    retrieved: list[bool] = []
    for code, query in enumerate(query_ids):
        scores, grades = run[query], qrels[query]
        ranked = list(map(float, scores.values()))
        if trec_eval_ties and ranked:
            ranked = _trec_eval_ranks(ranked, list(scores))
        docs = [*scores, *(doc for doc in grades if doc not in scores)]
        doc_ids += docs
        preds += [*ranked, *[float("nan")] * (len(docs) - len(scores))]
        target += [max(grades.get(doc, 0), 0) for doc in docs]
        indexes += [code] * len(docs)
        retrieved += [True] * len(scores) + [False] * (len(docs) - len(scores))
    return TrecRows(
        torch.tensor(preds, dtype=torch.float64),
        torch.tensor(target, dtype=torch.int64),
        torch.tensor(indexes, dtype=torch.int64),
        torch.tensor(retrieved, dtype=torch.bool),
        query_ids,
        doc_ids,
    )
