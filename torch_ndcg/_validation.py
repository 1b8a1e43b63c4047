"""Every input check of torch_ndcg, with errors that name the argument and what was given.

Shape and value problems raise ``ValueError``, wrong types and dtypes ``TypeError``. Public entry
points call these once; the kernels never check anything.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from torch_ndcg import _host
from torch_ndcg._host import DeferredCheck, assert_on_device
from torch_ndcg._options import (
    AGGREGATIONS,
    DISCOUNT_NAMES,
    EMPTY_TARGET_ACTIONS,
    GAIN_NAMES,
    REDUCTIONS,
    TIES_NAMES,
    WEIGHTINGS,
    accumulate_dtype,
    compute_dtype,
)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_k(k: Any) -> tuple[int, ...] | None:
    """Return ``k`` as a tuple of positive ints (or ``None``), or raise naming what was given."""
    if k is None:
        return None
    if _is_int(k) and k > 0:
        return (int(k),)
    is_sequence = isinstance(k, Sequence) and not isinstance(k, str) and len(k) > 0
    if is_sequence and all(_is_int(item) and item > 0 for item in k):
        return tuple(int(item) for item in k)
    raise ValueError(
        f"Expected `k` to be a positive int, a non-empty sequence of them, or None, but got {k!r}."
    )


def check_option(name: str, value: Any, allowed: Sequence[str], *, callable_ok: bool) -> None:
    """Check that ``value`` is one of ``allowed`` (or a callable where ``callable_ok``)."""
    if isinstance(value, str) and value in allowed:
        return
    if callable_ok and callable(value) and not isinstance(value, str):
        return
    choices = ", ".join(repr(a) for a in allowed)
    extra = " or a callable" if callable_ok else ""
    raise ValueError(f"Expected `{name}` to be one of {choices}{extra}, but got {value!r}.")


def check_options(
    gain: Any, discount: Any, *, ties: Any = None, empty_target_action: Any = None
) -> None:
    """Check the option strings of an entry point.

    ``ties`` and ``empty_target_action`` only where the entry point takes them (the losses take
    neither: ``None``).
    """
    check_option("gain", gain, GAIN_NAMES, callable_ok=True)
    check_option("discount", discount, DISCOUNT_NAMES, callable_ok=True)
    if ties is not None:
        check_option("ties", ties, TIES_NAMES, callable_ok=False)
    if empty_target_action is not None:
        check_option(
            "empty_target_action", empty_target_action, EMPTY_TARGET_ACTIONS, callable_ok=False
        )


def check_distinct_k(k: Any, ks: tuple[int, ...] | None) -> None:
    """The metrics name a result per cut-off: a ``k`` sequence must not repeat one."""
    if ks is not None and len(set(ks)) != len(ks):
        raise ValueError(
            f"Expected `k` to hold distinct cut-offs (each names one result), but got {k!r}."
        )


def check_ignore_index(ignore_index: Any) -> None:
    """``ignore_index`` is an int or ``None``."""
    if ignore_index is not None and not _is_int(ignore_index):
        raise TypeError(f"Expected `ignore_index` to be an int or None, but got {ignore_index!r}.")


def check_preds_target(preds: Any, target: Any) -> None:
    """Types, dtypes and shapes of ``preds`` and ``target``: equal shapes, a non-empty list dim."""
    for name, value in (("preds", preds), ("target", target)):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"Expected `{name}` to be a torch.Tensor, but got {type(value).__name__}."
            )
    if not preds.is_floating_point():
        hint = (
            " (scores come first, labels second: scikit-learn and TF-Ranking take the labels first)"
            if target.is_floating_point()
            else ""
        )
        raise TypeError(
            f"Expected `preds` to be a floating tensor, but got dtype {preds.dtype}{hint}."
        )
    if target.is_complex():
        raise TypeError(
            f"Expected `target` to be a bool, int or float tensor, but got {target.dtype}."
        )
    if preds.shape != target.shape:
        raise ValueError(
            "Expected `preds` and `target` to have the same shape, but got "
            f"{tuple(preds.shape)} and {tuple(target.shape)}."
        )
    if preds.ndim == 0:
        raise ValueError(
            "Expected `preds` to have a list dimension (at least 1-D), but got a 0-d tensor."
        )
    if preds.shape[-1] == 0:
        raise ValueError(
            "Expected a non-empty last (list) dimension, but `preds` has shape "
            f"{tuple(preds.shape)}."
        )


def check_mask(mask: Any, shape: torch.Size) -> None:
    """``mask`` is ``None`` or a bool tensor of ``shape``."""
    if mask is None:
        return
    if not isinstance(mask, Tensor):
        raise TypeError(
            f"Expected `mask` to be a bool torch.Tensor or None, but got {type(mask).__name__}."
        )
    if mask.dtype != torch.bool:
        raise TypeError(f"Expected `mask` to have dtype torch.bool, but got {mask.dtype}.")
    if mask.shape != shape:
        raise ValueError(
            f"Expected `mask` to have the shape of `preds` {tuple(shape)}, but got "
            f"{tuple(mask.shape)}."
        )


def label_dtype_holds(dtype: torch.dtype, value: int) -> bool:
    """Whether a label of ``dtype`` can equal ``value`` exactly.

    ``target == value`` would otherwise compare a wrapped or rounded ``value``: ``-1`` as 255 in
    uint8, ``2**32 + 1`` as 1 in int32, ``2**24 + 1`` as ``2**24`` in float32.
    """
    if dtype == torch.bool:
        return value in (0, 1)
    if not dtype.is_floating_point:
        integer_range = torch.iinfo(dtype)
        return integer_range.min <= value <= integer_range.max
    # An int is a float of `dtype` if it is within range and its odd part fits the mantissa.
    magnitude = abs(value)
    if magnitude == 0:
        return True
    float_range = torch.finfo(dtype)
    odd_part = magnitude // (magnitude & -magnitude)
    mantissa_bits = 1 - round(math.log2(float_range.eps))  # eps = 2^-(stored bits): 24 in float32
    return magnitude <= float_range.max and odd_part.bit_length() <= mantissa_bits


def real_items(target: Tensor, mask: Tensor | None, ignore_index: int | None) -> Tensor | None:
    """Combine ``mask`` and ``ignore_index`` into one mask of real items (``None``: all real).

    A label matches ``ignore_index`` only if it equals it exactly: an ``ignore_index`` that the
    label dtype cannot hold matches no label.
    """
    if ignore_index is None or not label_dtype_holds(target.dtype, ignore_index):
        return mask
    not_ignored = target != ignore_index
    return not_ignored if mask is None else mask & not_ignored


class CheckedValues(NamedTuple):
    """What `check_values` read off the real items.

    Attributes:
        max_label: the largest real label (0 where every item is padding).
        score_range: largest minus smallest real score.
    """

    max_label: int | float | None
    score_range: float | None


def largest_gain_label(
    gain: Any, dtype: torch.dtype, length: int, device: torch.device
) -> float | None:
    """The largest label whose gain is finite in ``dtype`` and sums finitely over a list.

    Gains are computed in ``dtype`` (`torch_ndcg._kernels.compute_dtype` of the scores)
    and a list's ``length`` gains are summed in the accumulation dtype (float64 wherever
    ``device`` has it), so a label is
    allowed while ``gain(y) <= min(max(dtype), max(float64) / length)``. ``None`` for a callable
    gain, whose growth is unknown. The same limit holds in every entry point.
    """
    if callable(gain):
        return None
    largest_gain = min(torch.finfo(dtype).max, torch.finfo(accumulate_dtype(device)).max / length)
    if gain == "linear":
        return largest_gain
    return math.log2(largest_gain + 1)  # 2^y - 1 <= largest_gain


def largest_value_at_most(limit: float, dtype: torch.dtype) -> float | int:
    """The largest value of ``dtype`` that is at most ``limit`` (> 0), computed on the host.

    A tensor compared with a Python number is compared in its own dtype, where ``limit`` would
    be rounded (127.99999991 to 128.0 in float32, letting a label of 128 through); this value
    is exact in ``dtype``, so ``x <= largest_value_at_most(limit, x.dtype)`` is ``x <= limit``.
    Plain Python arithmetic: no tensor, so nothing to read back or to break a compiled graph.
    """
    if not dtype.is_floating_point:
        integers = torch.iinfo(dtype)
        return int(min(max(math.floor(limit), integers.min), integers.max))
    floats = torch.finfo(dtype)
    if limit >= floats.max:
        return float(floats.max)
    digits = 1 - round(math.log2(floats.eps))  # significand bits, the leading one included
    fraction, exponent = math.frexp(limit)  # limit = fraction * 2^exponent, 1/2 <= fraction < 1
    return math.ldexp(math.floor(math.ldexp(fraction, digits)), exponent - digits)


def check_values(
    preds: Tensor,
    target: Tensor,
    mask: Tensor | None,
    *,
    gain: Any,
    ignore_index: int | None,
    finite_preds: bool = False,
    length: int | None = None,
) -> DeferredCheck | None:
    """No NaN among real scores, finite non-negative labels, gains that cannot overflow.

    With ``finite_preds`` (the losses, whose smooth ranks need score differences) the real
    scores must be finite too. Padded items (``mask`` False) are not checked: their values
    never count. ``length`` is the number of items whose gains are summed together (the list
    length; the last dimension by default).

    The input is reduced to four values on its device (smallest and largest real score and
    label; min/max propagate NaN). Where a read-back is allowed (the CPU, eager) they are
    returned as a `torch_ndcg._host.DeferredCheck` for the caller to read together
    with its own values, raising ``ValueError`` naming what was found; elsewhere each check is
    a device-side assertion with the same message (no values named), and ``None`` is returned.

    Returns:
        A check whose ``resolve()`` gives the `CheckedValues`, or ``None``.
    """
    if preds.numel() == 0:
        return None
    if mask is None:
        low_pred, high_pred = torch.aminmax(preds)
        real_target = target
    else:
        # Padded scores are left out (not replaced by 0, which would widen the range); with
        # no real item the smallest real score comes out above the largest.
        low_pred = torch.where(mask, preds, torch.inf).amin()
        high_pred = torch.where(mask, preds, -torch.inf).amax()
        real_target = torch.where(mask, target, 0)
    if real_target.dtype == torch.bool:
        real_target = real_target.to(torch.uint8)
    low, high = torch.aminmax(real_target)
    dtype = compute_dtype(preds.dtype)
    n_items = max(preds.shape[-1] if length is None else length, 1)
    limit = largest_gain_label(gain, dtype, n_items, preds.device)

    def messages() -> _ValueMessages:
        return _ValueMessages(gain, dtype, n_items, limit, ignore_index)

    if not _host.may_read_back(preds.device):
        text = messages()
        # One comparison a check where the dtype allows it (integer labels are never NaN or
        # infinite); each check is one device-side assertion, in the order of the CPU's.
        checks = [((low_pred == low_pred) & (high_pred == high_pred), text.nan_preds)]
        if finite_preds:
            finite = (low_pred > -torch.inf) & (high_pred < torch.inf)
            checks.append((finite | (low_pred > high_pred), text.infinite_preds))
        if real_target.is_floating_point():
            checks.append(((low == low) & (high == high), text.nan_target))
            checks.append((~high.isinf(), text.infinite_target))
        checks.append((low >= 0, text.negative_target))
        if limit is not None:
            # Compared in the labels' dtype, against the largest value of it within the limit.
            checks.append((high <= largest_value_at_most(limit, high.dtype), text.gain_overflow))
        for ok, message in checks:
            assert_on_device(ok, message.format(found="a value"))
        return None
    extremes = torch.cat(
        [
            torch.stack([low_pred, high_pred]).to(torch.float64),
            torch.stack([low, high]).to(torch.float64),
        ]
    )
    integer_labels = not real_target.is_floating_point()

    def judge(values: list[float]) -> CheckedValues:
        low_pred, high_pred, low, high = values
        if integer_labels:
            low, high = int(low), int(high)
        if low_pred != low_pred or high_pred != high_pred:
            raise ValueError(messages().nan_preds)
        if low_pred > high_pred:  # no real score
            low_pred = high_pred = 0.0
        if finite_preds and not (math.isfinite(low_pred) and math.isfinite(high_pred)):
            infinite = low_pred if math.isinf(low_pred) else high_pred
            raise ValueError(messages().infinite_preds.format(found=repr(infinite)))
        if low != low or high != high:
            raise ValueError(messages().nan_target)
        if math.isinf(high):
            raise ValueError(messages().infinite_target.format(found=repr(high)))
        if low < 0:
            raise ValueError(messages().negative(low))
        if limit is not None and high > limit:
            raise ValueError(messages().gain_overflow.format(found=repr(high)))
        return CheckedValues(high, high_pred - low_pred)

    return DeferredCheck(extremes, judge)


class _ValueMessages:
    """The messages of `check_values`, with ``{found}`` for the value found."""

    nan_preds = "Expected `preds` to contain no NaN, but found NaN scores."
    infinite_preds = "Expected `preds` to be finite, but found {found}."
    nan_target = "Expected `target` to contain no NaN, but found NaN labels."
    infinite_target = "Expected `target` to be finite, but found {found}."

    def __init__(
        self,
        gain: Any,
        dtype: torch.dtype,
        n_items: int,
        limit: float | None,
        ignore_index: int | None,
    ) -> None:
        self.ignore_index = ignore_index
        other_than = "" if ignore_index is None else f" other than `ignore_index`={ignore_index}"
        padding_hint = (
            "" if ignore_index is not None else " (if -1 marks padding, pass `ignore_index`=-1)"
        )
        self.negative_target = (
            f"Expected `target` to be non-negative{other_than}, but found a negative label"
            f"{padding_hint}."
        )
        shown = ""
        if limit is not None:
            shown = (
                f"{math.floor(limit * 100) / 100:.2f}" if gain == "exponential" else f"{limit:.6g}"
            )
        advice = "use `gain`='linear' or rescale" if gain == "exponential" else "rescale"
        self.gain_overflow = (
            f"Expected `target` values of at most {shown} with `gain`={gain!r} (each gain must "
            f"be finite in {dtype} and a list's {n_items} gains must sum to a finite float64), "
            f"but found {{found}}; {advice} the labels."
        )

    def negative(self, low: float) -> str:
        """The message for the smallest label ``low`` < 0, with a hint for padding by -1."""
        other_than = (
            "" if self.ignore_index is None else f" other than `ignore_index`={self.ignore_index}"
        )
        hint = (
            " (if -1 marks padding, pass `ignore_index`=-1)"
            if self.ignore_index is None and low == -1
            else ""
        )
        return (
            f"Expected `target` to be non-negative{other_than}, but found the value {low!r}{hint}."
        )


# --- Checks of the losses' hyper-parameters ---------------------------------------------------


def check_positive(name: str, value: Any, *, allow_zero: bool = False) -> None:
    """``value`` is a finite real number, > 0 (or >= 0 with ``allow_zero``)."""
    is_real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    ok = is_real and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        what = "non-negative" if allow_zero else "positive"
        raise ValueError(f"Expected `{name}` to be a {what} finite float, but got {value!r}.")


def check_loss_k(k: Any) -> int | None:
    """A loss takes one cut-off: a positive int or ``None``."""
    if k is None:
        return None
    if isinstance(k, numbers.Integral) and not isinstance(k, bool) and int(k) > 0:
        return int(k)
    raise ValueError(f"Expected `k` to be a positive int or None, but got {k!r}.")


def check_lambdarank_options(
    *, k: Any, sigma: Any, weighting: Any, mu: Any, reduction: Any
) -> int | None:
    """The hyper-parameters of `lambdarank_loss` (function and module); returns ``k``."""
    check_positive("sigma", sigma)
    check_option("weighting", weighting, WEIGHTINGS, callable_ok=False)
    check_positive("mu", mu, allow_zero=True)
    check_option("reduction", reduction, REDUCTIONS, callable_ok=False)
    return check_loss_k(k)


def check_approx_options(*, k: Any, temperature: Any, reduction: Any) -> int | None:
    """The hyper-parameters of `approx_ndcg_loss` (function and module); returns ``k``."""
    check_positive("temperature", temperature)
    check_option("reduction", reduction, REDUCTIONS, callable_ok=False)
    return check_loss_k(k)


def check_neural_options(
    *, k: Any, temperature: Any, max_iter: Any, tol: Any, reduction: Any
) -> int | None:
    """The hyper-parameters of `neural_ndcg_loss` (function and module); returns ``k``."""
    check_positive("temperature", temperature)
    if not (isinstance(max_iter, numbers.Integral) and not isinstance(max_iter, bool)) or (
        max_iter < 0
    ):
        raise ValueError(f"Expected `max_iter` to be a non-negative int, but got {max_iter!r}.")
    check_positive("tol", tol, allow_zero=True)
    check_option("reduction", reduction, REDUCTIONS, callable_ok=False)
    return check_loss_k(k)


def check_finite_scale(name: str, value: float, bound: float | Tensor, dtype: torch.dtype) -> None:
    """Raise naming ``name`` when ``bound``, a bound on the loss and its gradient, overflows.

    A tensor ``bound`` (computed on the device) is checked by a device-side assertion.
    """
    advice = (
        f"choose a {'smaller' if name == 'sigma' else 'larger'} `{name}` or rescale the scores."
    )
    message = (
        f"Expected `{name}` to keep the loss and its gradient finite in {dtype}, but got "
        f"{value!r} (with this input they could reach {{bound}}); {advice}"
    )
    largest = torch.finfo(dtype).max
    if isinstance(bound, Tensor):
        assert_on_device(bound < largest, message.format(bound="past the largest float"))
    elif not bound < largest:
        raise ValueError(message.format(bound=f"{bound:.3g}"))


# --- Arguments of other libraries -------------------------------------------------------------

# Argument names of torchmetrics, scikit-learn, TF-Ranking, allRank and LightGBM, and ours: what
# each of our functions says when it meets one (only names it has an equivalent for).
_CUTOFF_NAMES = {"top_k": "torchmetrics'", "topn": "TF-Ranking's", "eval_at": "LightGBM's"}
_SHARED_NAMES: dict[str, str] = {
    "padded_value_indicator": "`ignore_index` (allRank's `padded_value_indicator`, e.g. -1)",
    "label_gain": "a callable `gain` (LightGBM's `label_gain`: `gain`=lambda y: table[y.long()])",
}
METRIC_PORTED_NAMES: dict[str, str] = {
    **{
        name: f"`k` ({peer} `{name}`; a sequence of cut-offs works)"
        for name, peer in _CUTOFF_NAMES.items()
    },
    **_SHARED_NAMES,
    "ignore_ties": (
        "`ties`='first' for scikit-learn's `ignore_ties=True` (on tie-free scores; "
        "'average', the default, for False)"
    ),
}
_LOSS_NAMES: dict[str, str] = {
    **{name: f"`k` ({peer} `{name}`; one int)" for name, peer in _CUTOFF_NAMES.items()},
    **_SHARED_NAMES,
    "eps": "nothing: no epsilon is needed (allRank's `eps`)",
}
LAMBDARANK_PORTED_NAMES: dict[str, str] = {
    **_LOSS_NAMES,
    "weighing_scheme": (
        "`weighting` (allRank's lambdaRank_scheme = 'lambdarank', ndcgLoss2_scheme = 'ndcg2', "
        "ndcgLoss2PP_scheme = 'ndcg2pp'; its RankNet and ndcgLoss1 schemes have no equivalent)"
    ),
}
APPROX_PORTED_NAMES: dict[str, str] = {
    **_LOSS_NAMES,
    "alpha": "`temperature`=1/alpha (allRank's approxNDCGLoss `alpha`)",
}


NEURAL_PORTED_NAMES: dict[str, str] = {
    **_LOSS_NAMES,
    "powered_relevancies": (
        "`gain` (allRank's `powered_relevancies=True` is gain='exponential', False is 'linear')"
    ),
    "stochastic": "nothing: only the deterministic NeuralSort is implemented (allRank's "
    "`stochastic`)",
    "n_samples": "nothing: only the deterministic NeuralSort is implemented (allRank's "
    "`n_samples`)",
    "beta": "nothing: only the deterministic NeuralSort is implemented (allRank's `beta`)",
    "log_scores": "nothing: only the deterministic NeuralSort is implemented (allRank's "
    "`log_scores`)",
    "tau": "`temperature` (NeuralSort's `tau`)",
}


def reject_ported_names(owner: str, arguments: dict[str, Any], ported: dict[str, str]) -> None:
    """Raise ``TypeError`` for keyword ``arguments`` that ``owner`` does not take.

    Names of other libraries that ``owner`` has an equivalent for (``ported``: one of
    `METRIC_PORTED_NAMES`, `LAMBDARANK_PORTED_NAMES`,
    `APPROX_PORTED_NAMES`) get a pointer to it. The public functions and losses take
    ``**ported_names: NoReturn``: a type checker flags any extra keyword, and this turns it
    into an error that says what to write instead.
    """
    if not arguments:
        return
    name = next(iter(arguments))
    if name in ported:
        raise TypeError(
            f"`{owner}` got an unexpected keyword argument `{name}`: did you mean {ported[name]}?"
        )
    raise TypeError(f"`{owner}` got an unexpected keyword argument `{name}`.")


# --- Intervals and paired tests ------------------------------------------------------------------


def check_confidence(confidence: Any) -> None:
    """``confidence`` is ``None`` or a float strictly between 0 and 1."""
    if confidence is None:
        return
    if not isinstance(confidence, numbers.Real) or isinstance(confidence, bool):
        raise TypeError(f"Expected `confidence` to be a float or None, but got {confidence!r}.")
    if not 0 < float(confidence) < 1:
        raise ValueError(
            f"Expected `confidence` to be between 0 and 1 (e.g. 0.95), but got {confidence!r}."
        )


def check_paired_values(name: str, values: Any, ids: Tensor | None) -> None:
    """``values`` is a 1-D floating tensor: per-query values, one per id when ids are given."""
    if not isinstance(values, Tensor):
        raise TypeError(f"Expected `{name}` to be a torch.Tensor, but got {type(values).__name__}.")
    if not values.is_floating_point():
        raise TypeError(f"Expected `{name}` to be a floating tensor, but got dtype {values.dtype}.")
    if values.ndim != 1:
        raise ValueError(
            f"Expected `{name}` to be a 1-D tensor (a value per query), but got shape "
            f"{tuple(values.shape)}."
        )
    if ids is not None and ids.shape != values.shape:
        raise ValueError(
            f"Expected the ids of `{name}` to have the shape of its values, "
            f"{tuple(values.shape)}, but got {tuple(ids.shape)}."
        )


def check_query_ids(name: str, ids: Any) -> None:
    """``ids`` is a 1-D integer tensor of query ids."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"Expected `{name}` (query ids) to be a torch.Tensor, but got {ids!r}.")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(
            f"Expected `{name}` (query ids) to be an integer tensor, but got dtype {ids.dtype}."
        )
    if ids.ndim != 1:
        raise ValueError(
            f"Expected `{name}` (query ids) to be 1-D, but got shape {tuple(ids.shape)}."
        )


def check_resampling(n_resamples: Any, seed: Any) -> None:
    """``n_resamples`` is a positive int, ``seed`` an int."""
    if not _is_int(n_resamples):
        raise TypeError(f"Expected `n_resamples` to be an int, but got {n_resamples!r}.")
    if n_resamples < 1:
        raise ValueError(f"Expected `n_resamples` to be positive, but got {n_resamples}.")
    if not _is_int(seed):
        raise TypeError(f"Expected `seed` to be an int, but got {seed!r}.")


# --- Checks of the metric classes' own arguments ------------------------------------------------


def check_aggregation(aggregation: Any) -> None:
    """``aggregation`` is one of `AGGREGATIONS` or a callable (as torchmetrics')."""
    check_option("aggregation", aggregation, AGGREGATIONS, callable_ok=True)


def check_bool(name: str, value: Any) -> None:
    """``value`` is a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but got {value!r}.")


def check_indexes(indexes: Any, shape: torch.Size) -> None:
    """``indexes`` is an integer tensor of the shape of ``preds``."""
    if not isinstance(indexes, Tensor):
        raise TypeError(
            f"Expected `indexes` to be an int64 torch.Tensor, but got {type(indexes).__name__}."
        )
    if indexes.is_floating_point() or indexes.is_complex() or indexes.dtype == torch.bool:
        raise TypeError(
            f"Expected `indexes` to be an integer (int64) tensor, but got dtype {indexes.dtype}."
        )
    if indexes.shape != shape:
        raise ValueError(
            f"Expected `indexes` to have the shape of `preds` {tuple(shape)}, but got "
            f"{tuple(indexes.shape)}."
        )


def check_rows(
    preds: Any,
    target: Any,
    indexes: Any,
    *,
    gain: Any,
    ignore_index: int | None,
    validate_args: bool,
    scores: Tensor | None = None,
) -> Tensor | None:
    """Every check of flat query rows ``(preds, target, indexes)``; the mask of rows to keep.

    ``scores`` are the flat scores as they will be scored (the metric's stored dtype, whose
    gain limit applies), ``preds`` flattened by default. Each row's gain is checked alone
    (``length=1``): a query may span batches, its sum is checked when it is scored. One
    read-back on the CPU, none elsewhere.

    Returns:
        The flat mask of rows whose label is not ``ignore_index`` (``None``: every row).
    """
    if validate_args:
        check_preds_target(preds, target)
        check_indexes(indexes, preds.shape)
    flat_target = target.reshape(-1)
    real = real_items(flat_target, None, ignore_index)
    if validate_args:
        flat_scores = preds.reshape(-1) if scores is None else scores
        check = check_values(
            flat_scores, flat_target, real, gain=gain, ignore_index=ignore_index, length=1
        )
        if check is not None:
            check.resolve()
    return real


class CheckedLists(NamedTuple):
    """What `check_lists` made of its input.

    Attributes:
        real: the mask of real items (``None``: all real).
        check: the value checks still to be read back (see `check_values`), or ``None``
            (not validated, an empty input, or checked on the device).
    """

    real: Tensor | None
    check: DeferredCheck | None


def check_lists(
    preds: Any,
    target: Any,
    mask: Any,
    *,
    gain: Any,
    discount: Any,
    ignore_index: Any,
    validate_args: Any,
    ties: Any = None,
    empty_target_action: Any = None,
    finite_preds: bool = False,
) -> CheckedLists:
    """Every check of a ``[..., L]`` entry point, in order.

    With ``validate_args=False`` nothing is checked: only the mask is built. ``finite_preds``
    as in `check_values`.
    """
    check_bool("validate_args", validate_args)
    if validate_args:
        check_options(gain, discount, ties=ties, empty_target_action=empty_target_action)
        check_ignore_index(ignore_index)
        check_preds_target(preds, target)
        check_mask(mask, preds.shape)
    real = real_items(target, mask, ignore_index)
    if not validate_args:
        return CheckedLists(real, None)
    check = check_values(
        preds, target, real, gain=gain, ignore_index=ignore_index, finite_preds=finite_preds
    )
    return CheckedLists(real, check)
