"""A run and its qrels (trec_eval, pytrec_eval, ranx) as the flat rows of `retrieval_ndcg`."""

import os
from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["TrecRows", "from_trec"]

Table = Mapping[str, Mapping[str, float]]


class TrecRows(NamedTuple):
    """Flat rows of a run and its qrels (see `from_trec`).

    Attributes:
        preds: ``[N]`` float64 run scores, NaN on judged documents the run did not retrieve.
        target: ``[N]`` qrels grades (negative ones as 0; 0 for unjudged documents).
        indexes: ``[N]`` int64 query codes: row ``i`` belongs to ``query_ids[indexes[i]]``.
        retrieved: ``[N]`` bool, ``False`` on judged documents the run did not retrieve.
        query_ids: the run's query ids that the qrels judge, in the run's order.
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
                docs[fields[2]] = float(fields[4]) if run else int(fields[3])
            except ValueError:
                raise ValueError(
                    f"Expected {'a score' if run else 'an integer grade'} in the {kind} file "
                    f"{source}, but line {number} is {line.strip()!r}."
                ) from None
    return table


def from_trec(
    run: Table | str | os.PathLike[str], qrels: Table | str | os.PathLike[str]
) -> TrecRows:
    r"""Flat rows for `retrieval_ndcg` from a run and its qrels, trec_eval's way.

    For each query of the run that the qrels judge, a row per retrieved document (its score, its
    grade or 0) and a row per judged document the run did not retrieve (``retrieved`` False,
    score NaN): in the ideal DCG only. ``gain="linear"`` then gives trec_eval's ``ndcg_cut.k``
    on tie-free scores:

    $$
    \mathrm{nDCG@}k(q) = \frac{\sum_{r \le k} y_{\pi(r)} / \log_2(1 + r)}
        {\sum_{r \le k} y^*_{(r)} / \log_2(1 + r)}
    $$

    with $\pi$ the run's ranking and $y^*$ every judged grade of $q$, sorted. As trec_eval and
    pytrec_eval: negative grades count as 0, a run query absent from the qrels is dropped (and
    a qrels query absent from the run is not scored; for trec_eval's ``-c`` give it an empty
    run), a query with no relevant document is kept (``empty_target_action`` decides).

    Args:
        run: ``{query: {doc: score}}`` (as pytrec_eval and ranx take it) or the path of a TREC
            run file (``qid Q0 docno rank score tag``; the rank column is not read).
        qrels: ``{query: {doc: grade}}`` or the path of a TREC qrels file
            (``qid iteration docno grade``).

    Returns:
        A `TrecRows`: ``preds``, ``target``, ``indexes``, ``retrieved``, and the string ids
        (query ``ids[j]`` of `retrieval_ndcg`'s result is ``query_ids[ids[j]]``).

    Raises:
        ValueError: a file line without its columns, or whose score (run) or integer grade
            (qrels) is not a number; a document listed twice for a query.

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
    """
    run, qrels = _read(run, True), _read(qrels, False)
    query_ids = [query for query in run if query in qrels]
    preds: list[float] = []
    target: list[float] = []
    indexes: list[int] = []
    doc_ids: list[str] = []
    retrieved: list[bool] = []
    for code, query in enumerate(query_ids):
        scores, grades = run[query], qrels[query]
        docs = [*scores, *(doc for doc in grades if doc not in scores)]
        doc_ids += docs
        preds += [*map(float, scores.values()), *[float("nan")] * (len(docs) - len(scores))]
        target += [max(grades.get(doc, 0), 0) for doc in docs]
        indexes += [code] * len(docs)
        retrieved += [True] * len(scores) + [False] * (len(docs) - len(scores))
    return TrecRows(
        torch.tensor(preds, dtype=torch.float64),
        torch.tensor(target) if target else torch.zeros(0, dtype=torch.int64),
        torch.tensor(indexes, dtype=torch.int64),
        torch.tensor(retrieved, dtype=torch.bool),
        query_ids,
        doc_ids,
    )
