"""What every loss shares: its checked options, and its tensors checked and prepared.

A loss's public function checks its options (`check_options`) and calls its core, which
prepares the tensors (`prepare`: checked, flattened to ``[N, L]``, gains over the ideal DCG)
and computes; its module checks the options once, in ``__init__``, and calls the same core.
Gains, discounts and the ideal DCG@k come from `torch_ndcg._kernels`, so a loss optimises the
same nDCG that `torch_ndcg.ndcg` reports.
"""

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from torch_ndcg import _dcg_paths, _host, _kernels, _options, _pairwise, _validation

# The options only a loss takes, each with its check (called with the name and the value, it
# returns the value checked, or ``None`` for the value as given), in the order they are checked.
Checks = Mapping[str, Callable[[str, Any], Any]]


class LossOptions:
    """A loss's checked options, each by its keyword's name (``options.k``, ``options.sigma``).

    Made once by `check_options` (at a function call, or in a module's ``__init__``) and frozen:
    internals check nothing again, and a module's option setter checks them all into new ones.
    (A plain class, not a ``types.SimpleNamespace``: ``torch.compile`` traces its making.)
    """

    dense = False  # set by `check_options`; options pickled before it had none

    def __init__(self, **options: Any) -> None:
        self.__dict__.update(options)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Checked options are frozen: set `{name}` on the loss module.")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"LossOptions({shown})"

    if TYPE_CHECKING:  # the options of each loss, by name

        def __getattr__(self, name: str) -> Any: ...


def check_options(checks: Checks, **given: Any) -> LossOptions:
    """A loss's options ``given`` by keyword, checked: its own by ``checks``, then the shared.

    The options every loss shares are checked by `torch_ndcg._validation.check_loss_options`,
    after the loss's own (a loss without ``k`` and ``discount``, as the softmax losses, gets
    their defaults).
    """
    for name, check in checks.items():
        checked = check(name, given[name])
        if checked is not None:  # `check_option` and `check_bool` return nothing
            given[name] = checked
    given.setdefault("k", None)
    given.setdefault("discount", "log2")
    given["k"], given["gain"] = _validation.check_loss_options(
        given["k"],
        given["gain"],
        given["discount"],
        given["reduction"],
        given["ignore_index"],
        given["validate_args"],
    )
    dense = _validation.dense_options(given["gain"], given["discount"], given["ignore_index"])
    given["dense"] = dense
    return LossOptions(**given)


class Lists(NamedTuple):
    """A loss's tensors checked and flattened to ``[N, L]``, and what the checks read.

    A named tuple: made at every loss step, where a frozen dataclass's ``__init__`` costs more.

    Attributes:
        scores: ``[N, L]`` scores in the compute dtype, 0 on padding.
        labels: ``[N, L]`` labels as given (any value on padding), or in the scores' dtype where
            that holds them exactly (`dense_checks`).
        mask: ``[N, L]`` real items, or ``None``.
        weight: ``[N, L]`` weights (detached, in the compute dtype, 0 on padding), or ``None``.
        leading_shape: the shape of the input without its list dimension.
        score_range: largest minus smallest real score, when the checks read it back.
        largest_weight: the largest real ``weight``, when one was given and the input is
            checked (a float read back with the checks on the CPU, else a 0-d tensor): the
            bounds of a loss's values and slopes grow by it.
        exact_gains: the scores' dtype where it holds the plain gains and their sums exactly
            (`dense_checks`), which the softmax losses then compute them in; else ``None``:
            in the accumulation dtype, where a sum may come near the dtype's largest value.
    """

    scores: Tensor
    labels: Tensor
    mask: Tensor | None
    weight: Tensor | None
    leading_shape: torch.Size
    score_range: float | None
    largest_weight: float | Tensor | None
    exact_gains: torch.dtype | None


class LossInput(NamedTuple):
    """`Lists` of a loss that takes gains: with their gains over the ideal DCG@k.

    Attributes:
        scores: as `Lists`.
        mask: as `Lists`.
        kmax: positions the cut-off needs: ``k`` capped at the list length (``None``: all).
        scaled_gains: ``[N, L]`` gains divided by the list's ideal DCG@k, 0 on padding and in
            lists with no relevant item: each at most 1, whatever the labels' scale.
        has_relevant: ``[N]`` lists whose ideal DCG@k is positive.
        leading_shape: as `Lists`.
        score_range: as `Lists`.
        largest_weight: as `Lists`; the scaled gains are at most this.
        ideal: ``[N, 1]`` ideal DCG@k of each list, in the accumulation dtype.
        weight: as `Lists`: each loss applies them as it defines them
            (`torch_ndcg._kernels.weighted_gains` for a weight of the gains).
    """

    scores: Tensor
    mask: Tensor | None
    kmax: int
    scaled_gains: Tensor
    has_relevant: Tensor
    leading_shape: torch.Size
    score_range: float | None
    largest_weight: float | Tensor | None
    ideal: Tensor
    weight: Tensor | None


def checked_lists(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    weight: Tensor | None,
    options: LossOptions,
    extra_checks: _host.DeferredCheck | None = None,
) -> Lists:
    """Check a loss's tensors (its options are checked already) and flatten them to ``[N, L]``.

    The checks of every loss (`torch_ndcg._validation.check_lists`, with finite scores;
    `torch_ndcg._validation.check_weight`), read back together once on the CPU, device-side
    assertions elsewhere; a plain batch is checked from its extremes (`dense_checks`).
    ``extra_checks`` of the caller are read back with the input's and judged before them, in
    the order of their device-side assertions (made by the caller before this call).
    """
    small = None
    if mask is None and weight is None and extra_checks is None:
        small = dense_checks(preds, target, options)
    if small is not None:  # a plain CPU batch of float32 or float64 scores, checked
        span, labels, exact_gains = small
        scores, length = preds, preds.shape[-1]
        if preds.ndim != 2:
            scores, labels = preds.reshape(-1, length), labels.reshape(-1, length)
        return Lists(scores, labels, None, None, preds.shape[:-1], span, None, exact_gains)
    real, check = _validation.check_lists(
        # Checked detached: the checks' operations on the scores would be recorded by autograd
        # otherwise (a few microseconds each, for nothing). Any other type meets its TypeError.
        preds.detach() if isinstance(preds, Tensor) else preds,
        target,
        mask,
        options,
        finite_preds=True,
    )
    # A loss step reads back only the input checks, and only on the CPU (see _host), at once.
    # The caller's checks were made before these (as device-side assertions they fire first):
    # judged first, they name the same error eagerly as there.
    validate_args = options.validate_args
    weight_check = _validation.check_weight(weight, preds, real, validate_args=validate_args)
    _, checked, largest = _validation.resolve_checks(extra_checks, check, weight_check)
    length = preds.shape[-1]
    dtype = _options.compute_dtype(preds.dtype)
    # Batches of lists as they come are not reshaped: a view would be one more autograd node
    # (and, for any tensor, one more operation to dispatch).
    scores = _kernels.as_dtype(preds if preds.ndim == 2 else preds.reshape(-1, length), dtype)
    flat_real = real if real is None or real.ndim == 2 else real.reshape(-1, length)
    if flat_real is not None:
        # Padded scores may be anything (NaN, inf): they must not reach any arithmetic.
        scores = torch.where(flat_real, scores, 0)
    flat_weight = None
    if weight is not None:
        flat_weight = _kernels.as_dtype(weight.detach().reshape(-1, length), dtype)
        if flat_real is not None:
            flat_weight = flat_weight.where(flat_real, 0)
        if largest is None and validate_args and flat_weight.numel() > 0:
            largest = flat_weight.amax().double()  # checked on the device: found there
    return Lists(
        scores=scores,
        labels=target if target.ndim == 2 else target.reshape(-1, length),
        mask=flat_real,
        weight=flat_weight,
        leading_shape=preds.shape[:-1],
        score_range=None if checked is None else checked.score_range,
        largest_weight=largest if flat_weight is not None else None,
        exact_gains=None,
    )


def prepare(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    weight: Tensor | None,
    options: LossOptions,
    extra_checks: _host.DeferredCheck | None = None,
) -> LossInput:
    """`checked_lists`, with the lists' gains over their ideal DCG.

    Gains and ideal DCG are computed in the accumulation dtype (float64), where the largest
    gains validation admits (2^127 - 1 in float32) still sum finitely, and only their ratio, at
    most 1, is brought to the compute dtype: no overflow to 0 or NaN, and no ``1/IDCG`` of inf
    for tiny labels.
    """
    lists = checked_lists(preds, target, mask, weight, options, extra_checks)
    scores, flat_mask, gain = lists.scores, lists.mask, options.gain
    length = scores.shape[-1]
    kmax = length if options.k is None else min(options.k, length)
    acc = _options.accumulate_dtype(preds.device)
    item_gains = _kernels.list_gains(lists.labels, flat_mask, gain, acc)
    # From the top gains (the label counts would need the labels' range): no read-back.
    if preds.numel() <= _dcg_paths.SMALL_ELEMENTS and _options.declared(gain):
        # Padding's gain of 0 is the least: it never displaces a real item (as in the metric's
        # small path), so the gains are selected as they are, in one operation.
        best = item_gains.topk(kmax, dim=-1, sorted=True).values
    else:
        best = _kernels.ideal_ranked_gains(
            _kernels.Lists(lists.labels, flat_mask), item_gains, kmax, gain, acc
        )
    if acc == torch.float64:  # autocast and TF32 never touch a float64 product
        # `_kernels.cumulative_dcg` at the one cut-off, ``best`` in float64 already.
        ideal = best @ _kernels.cutoff_matrix(kmax, (kmax,), options.discount, acc, preds.device)
    else:
        with _kernels.full_precision(preds.device):
            ideal = _kernels.cumulative_dcg(best, (kmax,), options.discount)
    has_relevant = ideal > 0
    # Where the ideal DCG is not positive (no relevant item, or a callable gain or discount
    # that makes it 0) the list counts for nothing, whatever its gains; the quotient computed
    # there (inf or NaN) is not taken, and no gradient flows through gains.
    scaled_gains = torch.where(has_relevant, item_gains / ideal, 0)
    return LossInput(
        scores=scores,
        mask=flat_mask,
        kmax=kmax,
        scaled_gains=_kernels.as_dtype(scaled_gains, scores.dtype),
        has_relevant=has_relevant.squeeze(1),
        leading_shape=lists.leading_shape,
        score_range=lists.score_range,
        largest_weight=lists.largest_weight,
        ideal=ideal,
        weight=lists.weight,
    )


def dense_checks(
    preds: Any, target: Any, options: LossOptions
) -> tuple[float, Tensor, torch.dtype | None] | None:
    """The value checks of a `torch_ndcg._dcg_paths.dense_batch`: score range, labels, exact gains.

    The checks `checked_lists` makes through `torch_ndcg._validation.check_lists`, with the same
    rules (`torch_ndcg._validation.small_batch_holds`) and the same one read-back, in a few
    operations and lines: the extremes of the scores and labels. The labels come back in the
    scores' dtype, which holds them exactly. It holds their gains and every sum of them exactly
    too where the labels are integers and a list's length times its largest gain is below
    `_EXACT` (``L 2^y`` for ``"exponential"`` gains, ``L y`` for ``"linear"``, below 2^24 in
    float32: labels up to 13 at ``L = 1,024``); then that dtype comes back third, and the
    softmax losses compute their gains in it, not in float64, two conversions fewer (else
    ``None``). ``None`` where the general checks must run: without
    ``validate_args``, for input that is no dense batch, for integer labels past what the
    scores' dtype holds exactly, and for input that breaks a rule or calls for the
    swapped-arguments hint (they raise its error).
    """
    if not (options.validate_args and _dcg_paths.dense_batch(preds, target, options)):
        return None
    # The labels' extremes are read in the scores' dtype: a stack that promotes costs several
    # times more. Float labels are exact in it (never wider); integer labels up to `_EXACT`.
    labels = _kernels.as_dtype(target, preds.dtype)
    values = torch.stack([*torch.aminmax(preds.detach()), *torch.aminmax(labels)]).tolist()
    if values[3] >= _EXACT[preds.dtype]:  # an integer label may have rounded: checked exactly
        return None  # (float labels this large take the general checks too)
    if not _validation.small_batch_holds(values, options.gain, preds, target, finite_preds=True):
        return None
    largest = values[3] if options.gain == "linear" else 2 ** min(values[3], 64)
    exact = not target.is_floating_point() and largest * preds.shape[-1] < _EXACT[preds.dtype]
    return values[1] - values[0], labels, preds.dtype if exact else None


# Every integer below this is exact in the dtype: 2 / eps, 2^24 in float32 and 2^53 in float64.
_EXACT = {dtype: 2 / torch.finfo(dtype).eps for dtype in (torch.float32, torch.float64)}


def score_range(lists: Lists | LossInput) -> float | Tensor:
    """Largest minus smallest real score: the checks' value, else on the device (0 if none)."""
    if lists.score_range is not None:  # read back with the checks on the CPU
        return lists.score_range
    return real_span(lists.scores, lists.mask)


def real_span(scores: Tensor, real: Tensor | None) -> Tensor:
    """Largest minus smallest real score, a float64 0-d tensor on the device (0 if none)."""
    kept = scores.detach()
    if kept.numel() == 0:  # no score: no span (a reduction of nothing has no value)
        return kept.new_zeros((), dtype=torch.float64)
    high = kept if real is None else torch.where(real, kept, -torch.inf)
    low = kept if real is None else torch.where(real, kept, torch.inf)
    return (high.amax().double() - low.amin().double()).clamp(min=0)


def check_scale(
    lists: Lists | LossInput, name: str, value: float, bound: float | Tensor, count: int
) -> None:
    """``name``'s bound on a loss's values or slopes stays finite, times the largest weight too.

    `torch_ndcg._validation.check_finite_scale` names the hyper-parameter where its bound
    overflows alone; where the largest weight (given and checked) takes it past, ``weight`` is
    named (`torch_ndcg._validation.check_weight_scale`).
    """
    dtype = lists.scores.dtype
    _validation.check_finite_scale(name, value, bound, dtype, count=count)
    if lists.largest_weight is not None:
        _validation.check_weight_scale(bound, lists.largest_weight, dtype, count=count)


def reduce(per_list: Tensor, counted: Tensor, reduction: str, leading_shape: torch.Size) -> Tensor:
    """``"none"``: per list; ``"sum"``; ``"mean"`` over the lists in ``counted`` (0 if none).

    See `torch_ndcg._pairwise.reduce_losses`.
    """
    return _pairwise.reduce_losses(per_list, counted, reduction, leading_shape)[0]
