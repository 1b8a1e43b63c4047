"""Functional DCG and nDCG at one or many cut-offs: lists ``[..., L]`` and flat query rows."""

from collections.abc import Sequence

import torch
from torch import Tensor

from torch_ndcg import _dcg_paths, _grouping, _kernels, _options, _validation
from torch_ndcg._options import Cutoffs, Discount, EmptyTargetAction, Gain, ListOptions, Ties
from torch_ndcg.functional import _catalog

__all__ = ["dcg", "ndcg", "retrieval_ndcg"]


def _shaped(values: Tensor, dtype: torch.dtype, shape: Sequence[int], cutoffs: Cutoffs) -> Tensor:
    """``[N, len(k)]`` values (of lists or queries) as ``[*shape, len(k)]`` (one k: ``shape``).

    In the result dtype of scores of ``dtype`` (float64 stays, else float32).
    """
    out = values.to(dtype=_options.compute_dtype(dtype))
    out = out.reshape((*shape, out.shape[-1]))
    return out if cutoffs.is_sequence else out.squeeze(-1)


@_validation.names_ported_keywords(_validation.METRIC_PORTED_NAMES)
def dcg(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    exclude: Tensor | None = None,
    k: int | Sequence[int] | None = None,
    gain: Gain = "exponential",
    discount: Discount = "log2",
    ties: Ties = "average",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""Discounted cumulative gain of every list at one or many cut-offs.

    $$
    \mathrm{DCG@}k = \sum_{r=1}^{\min(k, L)} \mathrm{gain}(y_{\pi(r)}) \, \mathrm{discount}(r)
    $$

    where $\pi$ orders the items by ``preds``, descending. With ``ties="average"`` every
    item of a group of equal scores is credited the mean gain of its group (McSherry & Najork
    2008), also when the group straddles the cut-off; ``ties="first"`` keeps the order of
    appearance.

    Args:
        preds: ``[..., L]`` floating scores; the last dimension is the list. A 1-D tensor is one
            list. float16/bfloat16 are computed in float32.
        target: ``[..., L]`` non-negative relevance labels (bool, int or float); or, for
            ``[B, N]`` scores, a sparse COO or CSR ``[B, N]`` tensor of grades (absent = 0),
            scored without a dense target (see `torch_ndcg.functional.catalog_ndcg`; ties
            ``"first"`` then follow the item index; ``gain`` must give label 0 a gain of 0).

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; padded items never count. Default
            ``None``: every item is real.
        exclude: items that take no rank (already seen), for ``[B, N]`` scores: a bool
            ``[B, N]`` tensor, a sparse ``[B, N]`` tensor, or an integer ``[B, E]`` tensor of
            item ids (negative: padding). An item both relevant and excluded is an error.
            Default ``None``.
        k: cut-off: an int, a sequence of ints (all computed in one pass), or ``None`` (the
            default) for the whole list. A ``k`` larger than the list means the whole list.
        gain: ``"exponential"`` ($2^y - 1$, the default), ``"linear"`` ($y$), an
            element-wise callable of the float labels (finite, non-negative gains: with
            ``validate_args`` what it gives the real labels is checked), or a sequence of
            per-label gains (LightGBM's and XGBoost's ``label_gain``: label $i$ gains
            ``gain[i]``; labels must then be whole numbers below its length).
        discount: ``"log2"`` ($1/\log_2(1 + r)$, the default), ``"jarvelin"``
            ($1/\max(1, \log_2 r)$) or a callable of the 1-based float ranks, giving a tensor
            of their shape: finite, non-negative, positive at rank 1 and never growing with
            the rank (with ``validate_args``, checked on the CPU on the ranks to the largest
            ``k``).
        ties: ``"average"`` (the default) or ``"first"``.
        ignore_index: label value that marks padded items (for example ``-1``); default
            ``None``.
        validate_args: check the values (NaN, negative labels, gain overflow; the default
            ``True``). On the CPU the checks read back once per call, and the kernel its
            fast-path flags (a tie touching the top ``k``, the labels' range) once (a small
            batch reads both together); on an accelerator and under ``torch.compile``
            nothing is read back: the checks are device-side assertions (``RuntimeError``)
            and ties are averaged branch-free.
            ``False`` skips the checks that read values.

    Returns:
        One DCG per list: shape ``[...]``, or ``[..., len(k)]`` when ``k`` is a sequence; float32
        (float64 for float64 ``preds``), accumulated in float64.

    Raises:
        ValueError: shape mismatch, NaN, negative labels, overflowing exponential gain, bad
            ``k``, unknown option, empty list dimension, a callable ``gain`` or ``discount``
            that gives values unfit for nDCG.
        TypeError: non-floating ``preds``, non-bool ``mask``, non-int ``ignore_index``; a
            keyword name from another library (``top_k``, ``ignore_ties``, ...), naming ours.

    Example:
        Relevances 3, 2, 3, 0, 1 in ranked order, linear gain:
        $3 + 2/\log_2 3 + 3/2 + 0 + 1/\log_2 6 = 6.1487$.

        >>> import torch
        >>> from torch_ndcg import dcg
        >>> preds = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0])
        >>> target = torch.tensor([3, 2, 3, 0, 1])
        >>> dcg(preds, target, gain="linear")
        tensor(6.1487)
        >>> dcg(preds, target, k=[1, 3], gain="linear")
        tensor([3.0000, 5.7619])
        >>> dcg(preds, target, k=[1, 3], gain=[0, 1, 2, 3])  # a table: here the linear gain
        tensor([3.0000, 5.7619])
    """
    checked = _validation.check_list_options(
        k=k, gain=gain, discount=discount, ties=ties, empty_target_action="neg",
        ignore_index=ignore_index, validate_args=validate_args
    )
    values, _ = list_values(preds, target, (mask, exclude, None), checked, False)
    return _shaped(values, preds.dtype, preds.shape[:-1], checked.cutoffs)


@_validation.names_ported_keywords(_validation.METRIC_PORTED_NAMES)
def ndcg(
    preds: Tensor,
    target: Tensor,
    *,
    mask: Tensor | None = None,
    exclude: Tensor | None = None,
    retrieved: Tensor | None = None,
    k: int | Sequence[int] | None = None,
    gain: Gain = "exponential",
    discount: Discount = "log2",
    ties: Ties = "average",
    empty_target_action: EmptyTargetAction = "neg",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""Normalized discounted cumulative gain of every list at one or many cut-offs.

    $$
    \mathrm{nDCG@}k = \frac{\mathrm{DCG@}k}{\mathrm{IDCG@}k}
    $$

    where the ideal DCG ranks the real items of the list by their labels. See `dcg` for
    the arguments shared with it. No reduction is applied: take ``.mean()`` (or
    ``.nanmean()`` with ``empty_target_action="skip"``) yourself.

    Note:
        The default gain is exponential, $2^y - 1$ (LightGBM, TF-Ranking, Rax). torchmetrics'
        ``RetrievalNormalizedDCG`` and scikit-learn's ``ndcg_score`` use the label itself: pass
        ``gain="linear"`` to get their numbers. Graded labels give different values (0/1 labels
        the same).

    Args:
        preds: ``[..., L]`` floating scores.
        target: ``[..., L]`` non-negative labels.

    Keyword Args:
        mask: ``[..., L]`` bool, ``True`` for real items; default ``None``.
        exclude: items that take no rank, for ``[B, N]`` scores (see `dcg`); default ``None``.
        retrieved: ``[..., L]`` bool, ``False`` for an item judged but not retrieved by the
            run: it counts in the ideal DCG only, takes no rank and its score is never read
            (NaN allowed). ``mask`` / ``ignore_index`` win (padding is not judged); an
            excluded relevant item stays an error. Default ``None``: all retrieved. A run's
            documents with the rest of its judged documents and ``gain="linear"`` give
            trec_eval's ``ndcg_cut`` (tie-free scores); see `from_trec`.
        k: an int, a sequence of ints, or ``None`` (the default: the whole list).
        gain: as `dcg`.
        discount: as `dcg`.
        ties: as `dcg`.
        ignore_index: as `dcg`.
        validate_args: as `dcg`.
        empty_target_action: value of lists whose ideal DCG is 0 (no relevant item): ``"neg"``
            (the default) gives 0, ``"pos"`` gives 1, ``"skip"`` gives NaN, ``"error"``
            raises. A row of padding only (``mask`` / ``ignore_index``) is no list: it takes
            the value the action gives, and 0 under ``"error"``, which does not raise for it.

    Returns:
        One nDCG per list, shape ``[...]`` or ``[..., len(k)]``.

    Raises:
        ValueError: as `dcg`, and for a list with no relevant item under
            ``empty_target_action="error"``.
        TypeError: as `dcg`.

    Example:
        True relevance ``[3, 2, 1, 0, 0]``, scores ``[3, 2, 0, 0, 1]``, linear gain, ties
        averaged (the scikit-learn convention): DCG 4.6706, ideal DCG 4.7619.

        >>> import torch
        >>> from torch_ndcg import ndcg
        >>> target = torch.tensor([[3, 2, 1, 0, 0]])
        >>> preds = torch.tensor([[3.0, 2.0, 0.0, 0.0, 1.0]])
        >>> ndcg(preds, target, gain="linear")
        tensor([0.9808])
        >>> ndcg(preds, target, k=[1, 3], gain="linear")
        tensor([[1.0000, 0.8950]])
    """
    checked = _validation.check_list_options(
        k=k, gain=gain, discount=discount, ties=ties, empty_target_action=empty_target_action,
        ignore_index=ignore_index, validate_args=validate_args
    )
    values, _ = list_values(preds, target, (mask, exclude, retrieved), checked)
    return _shaped(values, preds.dtype, preds.shape[:-1], checked.cutoffs)


# What marks a batch's items: ``mask`` (real), ``exclude`` and ``retrieved``, as given. A plain
# tuple: made at every update.
Marks = tuple[Tensor | None, Tensor | None, Tensor | None]


def list_values(
    preds: Tensor, target: Tensor, marks: Marks, options: ListOptions, normalize: bool = True
) -> tuple[Tensor, Tensor | None]:
    """The one dispatch of `ndcg` (``normalize``), `dcg` and `torch_ndcg.NDCG.update`.

    Checks the tensors (the options are checked) and takes the path their metadata picks: the
    small path (`torch_ndcg._dcg_paths.small_batch`, as for the losses; averaged ties, no
    ``"error"`` on empty lists, no mask), whose one read-back brings the extremes the checks
    judge (where they break a rule, the general path raises its error); a sparse target
    streamed (`torch_ndcg.functional._catalog`; with ``retrieved`` made dense first: the stream
    ranks every item it scores); else the lists, ``exclude`` joining the padding.

    Returns:
        ``[N, len(k)]`` values in the accumulation dtype, and what marks the lists that count
        (a row of padding only is no list): ``[N, ...]`` bool, or ``None`` for all.
    """
    mask, exclude, retrieved = marks
    if (
        normalize
        and mask is None
        and exclude is None
        and retrieved is None
        and options.ties == "average"
        and options.empty_target_action != "error"
        and _dcg_paths.small_batch(preds, target, options)
    ):
        values, extremes = _dcg_paths.small_ndcg(preds, target, options)
        if extremes is None or _validation.small_batch_holds(extremes, options.gain, preds, target):
            return values, None
    if retrieved is not None and _catalog.is_sparse(target):
        target = target.to_dense()
    if _catalog.is_sparse(target):
        return _catalog.sparse_values(preds, target, exclude, mask, options, normalize=normalize)
    if exclude is not None:
        mask = _catalog.dense_mask_with_exclusions(exclude, mask, preds, target, options)
    # The value checks raise here (on the CPU one read-back; on an accelerator device-side
    # assertions); then the lists flattened to [N, L].
    real, check = _validation.check_lists(preds, target, mask, options, retrieved=retrieved)
    length = preds.shape[-1]
    preds, target = preds.reshape(-1, length), target.reshape(-1, length)
    real = None if real is None else real.reshape(-1, length)
    max_label = None if check is None else check.resolve().max_label
    if not normalize:
        return _dcg_paths.ranked_dcg(preds, target, real, options), real
    ranked = None if retrieved is None else retrieved.reshape(-1, length)
    value, ideal = _dcg_paths.dcg_and_ideal(preds, target, real, options, max_label, ranked)
    values = _kernels.normalize(value, ideal, options.empty_target_action, options.gain)
    if options.empty_target_action == "error":
        empty = _kernels.empty_lists(ideal, real)
        _validation.check_no_empty_target(empty, "list")
    return values, real


@_validation.names_ported_keywords(_validation.METRIC_PORTED_NAMES)
def retrieval_ndcg(
    preds: Tensor,
    target: Tensor,
    indexes: Tensor,
    *,
    retrieved: Tensor | None = None,
    k: int | Sequence[int] | None = None,
    gain: Gain = "exponential",
    discount: Discount = "log2",
    ties: Ties = "average",
    empty_target_action: EmptyTargetAction = "neg",
    ignore_index: int | None = None,
    validate_args: bool = True,
) -> tuple[Tensor, Tensor]:
    r"""NDCG of every query of flat rows ``(preds, target, indexes)``, at one or many cut-offs.

    $$
    \mathrm{nDCG@}k(q) = \frac{\mathrm{DCG@}k(q)}{\mathrm{IDCG@}k(q)}
    $$

    where query $q$ is the set of rows whose ``indexes`` equal $q$: the function
    `torch_ndcg.RetrievalNDCG` computes with, as `ndcg` is for
    `torch_ndcg.NDCG`. Query ids may be any int64 values, in any order. The rows are
    grouped by one stable sort of the ids, laid out as padded lists in buckets of similar size
    and scored by the kernel of `ndcg`: no loop over queries. With ``ties="first"`` the
    rows of a query keep their order of appearance. Options as `ndcg`; rows whose label
    equals ``ignore_index`` are dropped.

    Args:
        preds: floating scores, any shape (flattened).
        target: non-negative labels, the shape of ``preds``.
        indexes: integer query ids, the shape of ``preds``.

    Keyword Args:
        retrieved: bool, the shape of ``preds``: ``False`` for a row judged (in the qrels) but
            not retrieved by the run, which counts in its query's ideal DCG only (see `ndcg`;
            rows of ``ignore_index`` are dropped all the same). Default ``None``: all
            retrieved. `from_trec` makes these rows from a run and its qrels.
        k: an int, a sequence of ints, or ``None`` (the default: each whole query).
        gain: as `ndcg`.
        discount: as `ndcg`.
        ties: as `ndcg`.
        empty_target_action: value of queries with no relevant row: ``"neg"`` (the default)
            0, ``"pos"`` 1, ``"skip"`` NaN, ``"error"`` raises.
        ignore_index: label value of rows to drop; default ``None``.
        validate_args: check the input (as `ndcg`; also that no query's gains overflow).

    Returns:
        ``(values, ids)``: ``ids`` the ``[Q]`` sorted unique query ids, ``values`` their nDCG,
        ``[Q]`` or ``[Q, len(k)]`` for a sequence ``k`` (float32, float64 for float64 scores).
        No row at all gives no query: ``Q`` = 0.

    Raises:
        ValueError: as `ndcg`; ``indexes`` of another shape; a query whose gains overflow.
        TypeError: as `ndcg`; non-integer ``indexes``.

    Example:
        Query 7 is ranked ideally; query -2 puts its only relevant row second (1/log2(3)).

        >>> import torch
        >>> from torch_ndcg.functional import retrieval_ndcg
        >>> preds = torch.tensor([0.9, 0.2, 0.8, 0.1, 0.7])
        >>> target = torch.tensor([1, 0, 0, 0, 1])
        >>> indexes = torch.tensor([7, 7, -2, -2, -2])
        >>> retrieval_ndcg(preds, target, indexes, k=[1, 2])
        (tensor([[0.0000, 0.6309],
                [1.0000, 1.0000]]), tensor([-2,  7]))
    """
    checked = _validation.check_list_options(
        k=k, gain=gain, discount=discount, ties=ties, empty_target_action=empty_target_action,
        ignore_index=ignore_index, validate_args=validate_args
    )
    preds, target, indexes, real = checked_rows(preds, target, indexes, checked, retrieved)
    values, ids = _retrieval_values(preds, target, indexes, real, checked)
    return _shaped(values, preds.dtype, ids.shape, checked.cutoffs), ids


def checked_rows(
    preds: Tensor,
    target: Tensor,
    indexes: Tensor,
    options: ListOptions,
    retrieved: Tensor | None,
    stored: tuple[torch.dtype, torch.device] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Checked flat rows and the mask of those to keep (``None``: all), for `_retrieval_values`.

    Scores NaN on the rows not ``retrieved`` (how rows carry "judged, not retrieved"); ids
    int64. ``stored``: the dtype and device of `torch_ndcg.RetrievalNDCG`'s rows, which are
    then on that device, detached in that dtype (the gains' overflow limit is that of the
    dtype), and the rows to drop marked by a NaN label instead (the mask ``None``); scores and
    labels otherwise in their own dtype.
    """
    _validation.check_row_metadata(preds, target, indexes)
    scores, labels = preds.reshape(-1), target.reshape(-1)
    if stored is not None:
        _validation.check_device(preds, stored[1])
        scores, labels = scores.detach().to(stored[0]), labels.detach().to(stored[0])
    real = _validation.check_rows(
        preds, target, indexes, options, scores=scores, retrieved=retrieved
    )
    if retrieved is not None:
        scores = torch.where(retrieved.reshape(-1), scores, torch.nan)
    if stored is not None and real is not None:
        labels, real = torch.where(real, labels, torch.nan), None
    return scores, labels, indexes.reshape(-1).to(torch.int64), real


def _retrieval_values(
    preds: Tensor, target: Tensor, indexes: Tensor, real: Tensor | None, options: ListOptions
) -> tuple[Tensor, Tensor]:
    """`retrieval_ndcg` of checked flat rows, ``[Q, len(k)]`` in the accumulation dtype.

    ``real`` marks the rows to keep (``None``: all); they are dropped with one read-back. Rows
    with a NaN score (not retrieved) count in the ideal DCG only.
    """
    if real is not None:
        kept = real.nonzero().squeeze(1)
        preds, target, indexes = (rows.index_select(0, kept) for rows in (preds, target, indexes))
    probed = options.validate_args and callable(options.discount) and preds.shape[0] > 0
    if probed and not torch.compiler.is_compiling():
        # The ranks to the largest k in the longest query, whose length is read back (only
        # here: a callable discount, checked; not a hot path).
        longest = int(torch.unique(indexes, return_counts=True)[1].max())
        _validation.check_discount(options, longest, preds.dtype)
    ranked = ~preds.isnan()
    ids, dcg, ideal = _grouping.grouped_dcg_and_ideal(preds, target, indexes, options, ranked)
    if options.validate_args and not bool(ideal.isfinite().all()):
        raise ValueError(
            "Expected the gains of each query to sum to a finite float64, but a query's "
            "ideal DCG overflows; rescale the labels (or use `gain`='linear')."
        )
    if options.empty_target_action == "error":
        _validation.check_no_empty_target(ideal == 0, "query")
    return _kernels.normalize(dcg, ideal, options.empty_target_action, options.gain), ids
