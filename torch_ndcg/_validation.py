"""Every input check of torch_ndcg, with errors that name the argument and what was given.

Shape and value problems raise ``ValueError``, wrong types and dtypes ``TypeError``. Options are
checked once, where the user gives them (`check_list_options`, `check_loss_options`, ...),
into a frozen configuration; per call only the tensors are checked
(`check_lists`, `check_rows`). Metadata checks (types, dtypes, shapes, devices) always run:
they read no value. ``validate_args=False`` skips only the checks that read values
(`check_values`). The kernels never check anything.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import os
import sys
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, ParamSpec, TypeVar

import torch
from torch import Tensor

from torch_ndcg import _host, _options
from torch_ndcg._host import DeferredCheck, assert_on_device
from torch_ndcg._options import (
    AGGREGATIONS,
    CATALOG_PLACEHOLDER,
    DISCOUNT_NAMES,
    EMPTY_TARGET_ACTIONS,
    GAIN_NAMES,
    NOT_SHOWN,
    REDUCTIONS,
    TIES_NAMES,
    Cutoffs,
    ListOptions,
    accumulate_dtype,
    compute_dtype,
    is_integer_tensor,
)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_k(k: Any) -> tuple[int, ...] | None:
    """Return ``k`` as a tuple of positive ints (or ``None``), or raise naming what was given."""
    if k is None:
        return None
    ks = (k,) if _is_int(k) else k if isinstance(k, Sequence) and not isinstance(k, str) else ()
    if len(ks) > 0 and all(_is_int(item) and item > 0 for item in ks):
        return tuple(int(item) for item in ks)
    raise ValueError(
        f"Expected `k` to be a positive int, a non-empty sequence of them, or None, but got {k!r}."
    )


def check_option(
    name: str, value: Any, allowed: Sequence[str], *, callable_ok: bool, other: str = ""
) -> None:
    """Check that ``value`` is one of ``allowed`` (or a callable where ``callable_ok``).

    ``other`` names a further form the caller takes (checked there), for the message.
    """
    if value in allowed if isinstance(value, str) else callable_ok and callable(value):
        return
    choices = ", ".join(repr(a) for a in allowed)
    forms = (["a callable"] if callable_ok else []) + ([other] if other else [])
    extra = ""  # ", a callable or <other>", " or a callable", or nothing
    if forms:
        extra = "".join(f", {form}" for form in forms[:-1]) + f" or {forms[-1]}"
    raise ValueError(f"Expected `{name}` to be one of {choices}{extra}, but got {value!r}.")


def check_gain(gain: Any) -> Any:
    """``gain`` checked: a name or a callable as given, a table of per-label gains as a tuple.

    A table (LightGBM's and XGBoost's ``label_gain``: label i gains ``gain[i]``) is a list,
    tuple, 1-D tensor or array of at least one finite, non-negative number.
    """
    if _options.elementwise(gain):
        tables = "a sequence of per-label gains (label i gains `gain`[i])"
        check_option("gain", gain, GAIN_NAMES, callable_ok=True, other=tables)
        return gain
    try:
        table = torch.as_tensor(gain, dtype=torch.float64, device="cpu")
    except (TypeError, ValueError, RuntimeError):
        table = None
    if table is None or table.ndim != 1 or table.numel() == 0:
        raise ValueError(
            "Expected `gain` to be 'exponential', 'linear', a callable or a non-empty 1-D "
            f"sequence of per-label gains (label i gains `gain`[i]), but got {gain!r}."
        )
    entries = tuple(table.tolist())
    if not all(0 <= entry < math.inf for entry in entries):  # NaN fails too
        raise ValueError(
            "Expected `gain` as a table of per-label gains to hold finite, non-negative "
            "numbers, but got "
            f"{next(e for e in entries if not 0 <= e < math.inf)!r} in {list(entries)!r}."
        )
    return entries


def check_distinct_k(k: Any, ks: tuple[int, ...] | None) -> None:
    """The metrics name a result per cut-off: a ``k`` sequence must not repeat one."""
    if ks is not None and len(set(ks)) != len(ks):
        raise ValueError(
            f"Expected `k` to hold distinct cut-offs (each names one result), but got {k!r}."
        )


# Checked option sets kept for the functions, which get their options at every call: a loop
# calling `ndcg` with the same options checks them at its first call only. At most this many.
_KEPT_OPTION_SETS = 64
_kept_options: dict[tuple[Any, ...], ListOptions] = {}


def _plain_key(options: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``options`` as a key that only equal options of equal types share, or ``None`` (not kept).

    Each option, and each item of a list or tuple, goes with its type: ``True`` and ``1``, ``5``
    and ``5.0``, ``[5]`` and ``5`` are not one key. An unhashable option (a list of lists, an
    unhashable callable) is not kept: the lookup tells. Only options that passed are kept, and
    nothing under ``torch.compile`` (a graph checks as it traces).
    """
    if torch.compiler.is_compiling():
        return None
    key: list[Any] = []
    for option in options:  # a loop, not a generator: fewer Python calls per call
        kind = type(option)
        if kind in (list, tuple):
            key.append((kind, *[(type(item), item) for item in option]))
        else:
            key.append((kind, option))
    return tuple(key)


_LIST_OPTIONS = ("k", "gain", "discount", "ties", "empty_target_action", "ignore_index")


def check_list_options(**given: Any) -> ListOptions:
    """Every option of a ``[..., L]`` or flat-rows entry point, checked once into its config.

    ``given`` by keyword: ``k``, ``gain``, ``discount``, ``ties``, ``empty_target_action``,
    ``ignore_index`` and ``validate_args``. Options met at an earlier call are not checked
    again: the configs of options that passed are kept (see `_plain_key`), so bad ones raise at
    every call.
    """
    options = (*(given[name] for name in _LIST_OPTIONS), given["validate_args"])
    k, gain, discount, ties, empty_target_action, ignore_index, validate_args = options
    key = None if isinstance(gain, Tensor) else _plain_key(options)  # a tensor hashes by id
    try:
        found = _kept_options.get(key) if key is not None else None
    except TypeError:  # an unhashable option: not kept
        found = key = None
    if found is not None:
        return found
    cutoffs = Cutoffs(check_k(k), k is not None and not isinstance(k, numbers.Integral))
    check_bool("validate_args", validate_args)
    gain = check_gain(gain)
    check_option("discount", discount, DISCOUNT_NAMES, callable_ok=True)
    check_option("ties", ties, TIES_NAMES, callable_ok=False)
    check_option(
        "empty_target_action", empty_target_action, EMPTY_TARGET_ACTIONS, callable_ok=False
    )
    check_ignore_index(ignore_index)
    dense = dense_options(gain, discount, ignore_index)
    config = ListOptions(
        cutoffs, gain, discount, ties, empty_target_action, ignore_index, validate_args, dense
    )
    if key is not None:
        if len(_kept_options) >= _KEPT_OPTION_SETS:
            _kept_options.clear()
        _kept_options[key] = config
    return config


def dense_options(gain: Any, discount: Any, ignore_index: Any) -> bool:
    """Whether checked options admit a `torch_ndcg._dcg_paths.dense_batch`, decided once.

    A named gain and discount and no ``ignore_index``: then the checks of a dense batch are
    those of its extremes, and a small one may take the small path.
    """
    return _options.named(gain) and isinstance(discount, str) and ignore_index is None


def check_ignore_index(ignore_index: Any) -> None:
    """``ignore_index`` is an int or ``None``."""
    if ignore_index is not None and not _is_int(ignore_index):
        raise TypeError(f"Expected `ignore_index` to be an int or None, but got {ignore_index!r}.")


def _not_a_tensor(name: str, value: Any, kind: str = "a torch.Tensor") -> TypeError:
    return TypeError(f"Expected `{name}` to be {kind}, but got {type(value).__name__}.")


def _elsewhere(name: str, value: Tensor, like: Tensor, of: str) -> ValueError:
    """The error for ``value`` (argument ``name``) on another device than ``like`` (``of``)."""
    return ValueError(
        f"Expected `{name}` on the device of `{of}` ({like.device}), but got {value.device}."
    )


def check_same_device(name: str, value: Any, like: Tensor, of: str = "preds") -> None:
    """A tensor ``value`` (argument ``name``) lies on the device of ``like`` (argument ``of``).

    Every tensor of a call is on one device: an input elsewhere raises here, naming it, not
    in the first operation that mixes them. Anything but a tensor passes (its own check
    names it). From metadata: nothing is read.
    """
    if isinstance(value, Tensor) and value.device != like.device:
        raise _elsewhere(name, value, like, of)


def check_preds_target(
    preds: Any, target: Any, *, target_name: str = "target", rows: bool = False
) -> None:
    """Types, dtypes and shapes of ``preds`` and ``target``: equal shapes, a non-empty list dim.

    ``target_name`` is the name the caller gives the labels (``"clicks"``), as errors name it.
    ``rows``: flat query rows, which have no list dimension (no row at all is allowed).
    """
    for name, value in (("preds", preds), (target_name, target)):
        if not isinstance(value, Tensor):
            raise _not_a_tensor(name, value)
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
            f"Expected `{target_name}` to be a bool, int or float tensor, but got {target.dtype}."
        )
    if preds.shape != target.shape:
        raise ValueError(
            f"Expected `preds` and `{target_name}` to have the same shape, but got "
            f"{tuple(preds.shape)} and {tuple(target.shape)}."
        )
    if target.device != preds.device:
        raise _elsewhere(target_name, target, preds, "preds")
    if preds.ndim == 0:
        raise ValueError(
            "Expected `preds` to have a list dimension (at least 1-D), but got a 0-d tensor."
        )
    if preds.shape[-1] == 0 and not rows:
        raise ValueError(
            "Expected a non-empty last (list) dimension, but `preds` has shape "
            f"{tuple(preds.shape)}."
        )


def _check_tensor(
    name: str, value: Any, like: Tensor | None, kind: str, wrong_dtype: str | None, of: str
) -> Tensor:
    """``value`` is a tensor of a right dtype, of the shape and on the device of ``like``.

    ``like`` is the argument ``of`` (``preds``; ``None``: any shape and device). Else a
    ``TypeError`` says that it was to be ``kind`` or, where its dtype is wrong, to
    ``wrong_dtype`` (``None``: the dtype is right) its dtype, or a ``ValueError`` names another
    shape or device. The one check of the tensors that go with ``preds`` item by item (masks,
    weights, click tensors, query ids).
    """
    if not isinstance(value, Tensor):
        raise _not_a_tensor(name, value, kind)
    if wrong_dtype is not None:
        raise TypeError(f"Expected `{name}` to {wrong_dtype} {value.dtype}.")
    if like is not None:
        if value.shape != like.shape:
            raise ValueError(
                f"Expected `{name}` to have the shape of `{of}` {tuple(like.shape)}, but got "
                f"{tuple(value.shape)}."
            )
        if value.device != like.device:  # the device is that of the first argument named
            raise _elsewhere(name, value, like, of.split("`")[0])
    return value


def check_mask(mask: Any, like: Tensor, name: str = "mask", of: str = "preds") -> None:
    """``mask`` (or the bool argument ``name``) is ``None`` or a bool tensor like ``like``.

    ``like`` is the argument ``of``: the mask has its shape and lies on its device.
    An integer ``mask`` of that shape is taken for query ids (torchmetrics' retrieval metrics
    take ``indexes`` third), and the error says where those go.
    """
    if mask is not None:
        dtype_ok = isinstance(mask, Tensor) and mask.dtype == torch.bool
        kind = "a bool torch.Tensor or None"
        expected = "have dtype torch.bool, but got"
        if (
            not dtype_ok
            and name == "mask"
            and isinstance(mask, Tensor)
            and is_integer_tensor(mask)
            and mask.shape == like.shape
        ):
            raise TypeError(
                f"Expected `mask` to {expected} {mask.dtype}. If these are query ids "
                "(torchmetrics' `indexes`), pass the flat rows to `RetrievalNDCG` or "
                "`retrieval_ndcg` instead: `RetrievalNDCG(k=...).update(preds, target, "
                "indexes)`; `NDCG` and `ndcg` take one list per row."
            )
        _check_tensor(name, mask, like, kind, None if dtype_ok else expected, of)


def label_dtype_holds(dtype: torch.dtype, value: int) -> bool:
    """Whether a label of ``dtype`` can equal ``value`` exactly.

    ``target == value`` would otherwise compare a wrapped or rounded ``value``: ``-1`` as 255 in
    uint8, ``2**32 + 1`` as 1 in int32, ``2**24 + 1`` as ``2**24`` in float32.
    """
    if dtype == torch.bool:
        return value in (0, 1)
    # It does if it is the largest value of `dtype` up to itself (floats are symmetric).
    magnitude = abs(value) if dtype.is_floating_point else value
    return largest_value_at_most(magnitude, dtype) == magnitude


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


def largest_value_at_most(limit: float, dtype: torch.dtype) -> float | int:
    """The largest value of ``dtype`` that is at most ``limit`` (>= 0 for floats), on the host.

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
    options: Any,
    finite_preds: bool = False,
    ranked: Tensor | None = None,
) -> DeferredCheck | None:
    """No NaN among real scores, finite non-negative labels, gains that cannot overflow.

    With ``finite_preds`` (the losses, whose smooth ranks need score differences) the real
    scores must be finite too. Padded items (``mask`` False) are not checked: their values
    never count; nor are the scores of items that take no rank (``ranked`` False: judged, not
    retrieved). The gains of a list (the last dimension) are summed together. ``options`` are
    checked options (their ``gain`` and ``ignore_index`` apply).

    The input is reduced to four values on its device (smallest and largest real score and
    label; min/max propagate NaN). Where a read-back is allowed (the CPU, eager) they are
    returned as a `torch_ndcg._host.DeferredCheck` for the caller to read together
    with its own values, raising ``ValueError`` naming what was found; elsewhere each check is
    a device-side assertion with the same message (no values named), and ``None`` is returned.
    Float labels also get the swapped-arguments hint where the score extremes look like labels
    (`label_like`): then two passes over the input, with a read-back of their own.

    Returns:
        A check whose ``resolve()`` gives the `CheckedValues`, or ``None``.
    """
    if preds.numel() == 0:
        return None
    n_items, gain, ignore_index = max(preds.shape[-1], 1), options.gain, options.ignore_index
    read_back = _host.may_read_back(preds.device)  # eager: not compiling
    real_target = target if mask is None else torch.where(mask, target, 0)
    if real_target.dtype == torch.bool:
        real_target = real_target.to(torch.uint8)
    float_labels = real_target.is_floating_point()
    # Eager, the rules of an input kind are built once (a training loop meets few kinds); a
    # graph that torch.compile traces builds its own (`read_back` first: it spares a call).
    declared = gain if _options.declared(gain) else None
    # What a callable gives the real labels, in the dtype the gains are computed in: the
    # scores' compute dtype, the accumulation dtype for the losses (`finite_preds`).
    given: tuple[Tensor, Tensor] | None = None  # their smallest and largest
    if declared is None:
        dtype = accumulate_dtype(preds.device) if finite_preds else compute_dtype(preds.dtype)
        gains = callable_gains(gain, real_target, dtype)
        if mask is None:
            given = (gains.amin(), gains.amax())
        else:  # padding's gain (of label 0 here) is never taken
            given = (gains.where(mask, math.inf).amin(), gains.where(mask, -math.inf).amax())
    kind = (declared, preds.dtype, n_items, preds.device, ignore_index, finite_preds, float_labels)
    rules = (eager_rules if read_back or not torch.compiler.is_compiling() else _value_rules)(kind)
    scored = mask if ranked is None else ranked if mask is None else mask & ranked
    if scored is None:
        low_pred, high_pred = torch.aminmax(preds)
    else:
        # Padded scores are left out (not replaced by 0, which would widen the range); with
        # no real item the smallest real score comes out above the largest.
        low_pred = torch.where(scored, preds, torch.inf).amin()
        high_pred = torch.where(scored, preds, -torch.inf).amax()
    low, high = torch.aminmax(real_target)
    # A table of gains is indexed by the labels: float labels must be whole numbers.
    fraction = _options.indexed(gain) and float_labels and (real_target != real_target.trunc())
    if not read_back:
        deferred = defer(rules(low_pred, high_pred, low, high))  # device-side assertions
        if fraction is not False:
            assert_on_device(~fraction.any(), _FRACTIONAL.format(found="a fractional label"))
        if given is not None:
            low_gain, high_gain = given
            found = "a negative or non-finite gain"
            assert_on_device((low_gain >= 0) & (high_gain < math.inf), _GAINS.format(found=found))
        return deferred
    values = [low_pred.double(), high_pred.double(), low.double(), high.double()]
    if fraction is not False:  # the largest fractional label, read with the extremes
        values.append(torch.where(fraction, real_target, -torch.inf).amax().double())
    if given is not None:  # a callable's gains (never with a table's fractions)
        values.extend(extreme.double() for extreme in given)
    extremes = torch.stack(values)

    def judge(values: list[float]) -> CheckedValues:
        low_pred, high_pred, low, high = values[:4]
        if not float_labels:
            low, high = int(low), int(high)
        if low_pred > high_pred:  # no real score
            low_pred = high_pred = 0.0
        _judge(rules(low_pred, high_pred, low, high), [])  # known: judged now
        if given is not None and not (values[4] >= 0 and values[5] < math.inf):  # NaN fails
            found = values[4] if not values[4] >= 0 else values[5]
            raise ValueError(_GAINS.format(found=f"the gain {found!r}"))
        if given is None and len(values) > 4 and values[4] > -math.inf:
            raise ValueError(_FRACTIONAL.format(found=f"the label {values[4]!r}"))
        if float_labels and label_like(low_pred, high_pred):
            # Were float labels passed first? Whole scores, some fractional label: one more read.
            real_preds = preds if scored is None else torch.where(scored, preds, 0)
            whole = (real_preds == real_preds.round()).all()
            if whole & (real_target != real_target.round()).any():
                warnings.warn(
                    f"`preds` holds only whole numbers from {low_pred:g} to {high_pred:g} and "
                    "`target` fractional values: were scores and labels swapped? Scores come "
                    "first, labels second (scikit-learn and TF-Ranking take the labels first).",
                    UserWarning,
                    stacklevel=_frames_to_the_caller(),
                )
        return CheckedValues(high, high_pred - low_pred)

    return DeferredCheck(extremes, judge)


_GAINS = (
    "Expected `gain` to give finite, non-negative gains of the real labels (as a named gain "
    "or a table does: then nDCG is at most 1), but it gave {found}."
)


def callable_gains(gain: Any, labels: Tensor, dtype: torch.dtype) -> Tensor:
    """What a callable ``gain`` gives ``labels``, taken in ``dtype``.

    A tensor of the labels' shape, or raise naming ``gain`` and what it gave.
    """
    return shaped_gains(gain(labels.to(dtype=dtype)), labels.shape)


def shaped_gains(given: Any, shape: torch.Size | tuple[int, ...]) -> Tensor:
    """What a callable ``gain`` gave labels of ``shape``: a tensor of it, else raise naming it."""
    if not (isinstance(given, Tensor) and given.shape == shape):
        found = f"shape {tuple(given.shape)}" if isinstance(given, Tensor) else type(given)
        raise ValueError(
            f"Expected `gain` to give a tensor of the shape of the labels it is given, "
            f"{tuple(shape)}, but it gave {found}."
        )
    return given.detach()


_FRACTIONAL = (
    "Expected whole-number `target` labels with `gain` a table of per-label gains (label i "
    "gains `gain`[i]), but found {found}."
)

# Scores that are whole numbers in [0, this] look like graded labels (LETOR grades go to 4,
# Yahoo's to 4, MSLR's to 4; a few data sets to 31).
_LABEL_LIKE_LARGEST = 31


def small_batch_holds(
    extremes: Sequence[float],
    gain: Any,
    preds: Tensor,
    target: Tensor,
    *,
    finite_preds: bool = False,
) -> bool:
    """Whether the extremes a small path read back break no value check and need no hint.

    ``extremes``: smallest and largest score and label of a dense CPU batch whose rules are
    those of `check_values` (no padding, no ``ignore_index``; ``finite_preds`` as there, for
    the losses). Where they fail, the caller takes the general path, whose checks raise the
    error (or warn) naming the exact value.
    """
    low_pred, high_pred, low, high = extremes
    float_labels = target.is_floating_point()
    kind = (gain, preds.dtype, preds.shape[-1], _CPU, None, finite_preds, float_labels)
    rules = eager_rules(kind)
    # A loop, not all() of a generator: fewer Python calls on the small hot paths.
    for check in rules(low_pred, high_pred, low, high):
        if not check.ok:
            return False
    return not (float_labels and label_like(low_pred, high_pred))


_CPU = torch.device("cpu")


def label_like(low_pred: float, high_pred: float) -> bool:
    """Whether real scores from ``low_pred`` to ``high_pred`` could all be graded labels.

    Whole-number extremes in ``[0, 31]`` (`_LABEL_LIKE_LARGEST`), not all equal (equal scores
    are no sign): only then can every score be a whole number that looks like a label.
    """
    return 0 <= low_pred < high_pred <= _LABEL_LIKE_LARGEST and low_pred % 1 == high_pred % 1 == 0


def _frames_to_the_caller() -> int:
    """The ``stacklevel`` of the first frame outside torch_ndcg and torchmetrics.

    A warning then points to the user's line (``skip_file_prefixes`` needs Python 3.12).
    """
    package = os.path.dirname(os.path.abspath(__file__))
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(package) or "torchmetrics" in frame.f_code.co_filename
    ):
        frame, level = frame.f_back, level + 1
    return level


# What the value checks of an input depend on, besides its values (the key of its rules): a
# declared gain (a name or a table; None for a callable), the scores' dtype, the items whose
# gains are summed together, the device, `ignore_index`, whether the scores must be finite and
# whether the labels are floats. A plain tuple: made at every call of the small paths.
InputKind = tuple[Any, torch.dtype, int, torch.device, int | None, bool, bool]


def _value_rules(kind: InputKind) -> Callable[[Any, Any, Any, Any], list[Check]]:
    """The checks of `check_values` that apply to this ``kind`` of input, from its extremes.

    The result takes ``(low_pred, high_pred, low, high)``: as tensors on the device (each
    `Check` pending, for a device-side assertion) or as numbers read back (each known), and
    states the checks in the order they are judged. Scores of ``preds_dtype``, gains summed
    ``n_items`` at once; only a declared ``gain`` (a name or a table; ``None`` for a callable)
    has a limit and enters a message. One comparison a check where the dtype allows it (integer
    labels are never NaN or infinite). A length that torch.compile traces as a symbol (dynamic
    lengths) is compared, never made a number (which would break the graph or specialise it to
    one length): where the gain limit depends on it (float64 scores), the message gives its
    formula, and labels are compared with the symbol itself.
    """
    gain, preds_dtype, n_items, device, ignore_index, finite_preds, float_labels = kind
    # The metrics take `retrieved`: the NaN scores of `from_trec`'s rows are judged documents
    # that the run did not retrieve.
    not_retrieved = (
        ""
        if finite_preds
        else " (if NaN marks judged documents not retrieved, as in the rows of `from_trec`, "
        "pass `retrieved=`, e.g. `retrieved=rows.retrieved`)"
    )
    nan_scores = f"Expected `preds` to contain no NaN, but found NaN scores{not_retrieved}."
    other_than = "" if ignore_index is None else f" other than `ignore_index`={ignore_index}"
    negative = f"Expected `target` to be non-negative{other_than}, but found {{found}}."
    padding_hint = (
        " (if -1 marks padding, as `pad_by_query` pads labels, give the lists' `mask` or "
        "pass `ignore_index`=-1)"
        if ignore_index is None
        else ""
    )
    within: Callable[[Any], Any] | None = None
    if gain is not None:
        # Gains are computed in `dtype` and a list's gains summed in the accumulation dtype
        # (float64 wherever the device has it): a label is allowed while gain(y) <=
        # min(max(dtype), max(float64) / length). The length counts only where finite gains
        # could sum past the accumulation dtype (float64 scores, or float32 sums on MPS): integer
        # arithmetic there, so that a symbolic length gives a guard, not a number. The same
        # limit in every entry point.
        dtype = compute_dtype(preds_dtype)
        largest_sum = torch.finfo(accumulate_dtype(device)).max
        sums_bind = n_items > int(largest_sum // torch.finfo(dtype).max)
        largest_gain = min(torch.finfo(dtype).max, largest_sum / (n_items if sums_bind else 1))
        limit = _options.largest_label(gain, largest_gain)
        # Traced, a length-bound limit may be a symbol (dynamic lengths): never written out.
        number = not (sums_bind and torch.compiler.is_compiling())
        named_as, shown, advice = _options.limit_words(gain, limit, number)
        count = f"{n_items} " if isinstance(n_items, int) else ""
        # Rows checked one by one (a query's are summed where it is scored) sum no gains here.
        summed = "" if n_items == 1 else f" and a list's {count}gains must sum to a finite float64"
        too_large = (
            f"Expected `target` values of at most {shown} with `gain`{named_as} (each gain "
            f"must be finite in {dtype}{summed}), but found {{found}}; {advice} the labels."
        )

        def within(high: Any) -> Any:
            if isinstance(high, Tensor) and number:
                # Compared in the labels' dtype, against its largest value within the limit.
                return high <= largest_value_at_most(limit, high.dtype)
            return high <= limit  # read back, or against a traced symbol as it is

    def checks(low_pred: Any, high_pred: Any, low: Any, high: Any) -> list[Check]:
        read = not isinstance(low, Tensor)  # numbers read back: each check is known
        stated = [Check((low_pred == low_pred) & (high_pred == high_pred), None, nan_scores)]
        if finite_preds:
            # With no real score the smallest comes out above the largest: nothing to check.
            finite = ((low_pred > -math.inf) & (high_pred < math.inf)) | (low_pred > high_pred)
            found = (low_pred if low_pred == -math.inf else high_pred) if read else None
            stated.append(Check(finite, found, "Expected `preds` to be finite, but found {found}."))
        if float_labels:
            nan = "Expected `target` to contain no NaN, but found NaN labels."
            stated.append(Check((low == low) & (high == high), None, nan))
            infinite = "Expected `target` to be finite, but found {found}."
            stated.append(Check(abs(high) != math.inf, high, infinite))
        if not read:
            found = "a negative label" + padding_hint
        else:
            found = f"the value {low!r}" + (padding_hint if low == -1 else "") if low < 0 else None
        stated.append(Check(low >= 0, found, negative))
        if within is not None:
            stated.append(Check(within(high), high, too_large))
        return stated

    return checks


# Rule lists for up to this many input kinds (dtypes, list lengths, options) are kept.
_KEPT_RULE_LISTS = 256
eager_rules = functools.lru_cache(maxsize=_KEPT_RULE_LISTS)(_value_rules)


# --- Checks of the losses' hyper-parameters ---------------------------------------------------


def check_positive(name: str, value: Any, *, allow_zero: bool = False) -> Any:
    """``value`` is a finite real number, > 0 (or >= 0 with ``allow_zero``): returned as given."""
    is_real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    # `value - value == 0` is `math.isfinite(value)` in plain arithmetic, which torch.compile
    # also traces where it makes a float argument a symbol (dynamic=True).
    ok = is_real and value - value == 0 and (value >= 0 if allow_zero else value > 0)
    if not ok:
        what = "non-negative" if allow_zero else "positive"
        raise ValueError(f"Expected `{name}` to be a {what} finite float, but got {value!r}.")
    return value


def check_positive_int(name: str, value: Any, *, allow_zero: bool = False) -> int:
    """``value`` is a positive int (or >= 0 with ``allow_zero``): returned as an int."""
    if _is_int(value) and (value >= 0 if allow_zero else value > 0):
        return int(value)
    what = "non-negative" if allow_zero else "positive"
    raise ValueError(f"Expected `{name}` to be a {what} int, but got {value!r}.")


def check_loss_k(k: Any) -> int | None:
    """A loss takes one cut-off: a positive int or ``None``."""
    if k is not None and not (_is_int(k) and k > 0):
        raise ValueError(f"Expected `k` to be a positive int or None, but got {k!r}.")
    return None if k is None else int(k)


def check_loss_options(
    k: Any, gain: Any, discount: Any, reduction: Any, ignore_index: Any, validate_args: Any
) -> tuple[int | None, Any]:
    """The options every loss shares, checked (after its own): ``k`` and ``gain`` as checked."""
    check_option("reduction", reduction, REDUCTIONS, callable_ok=False)
    checked_k = check_loss_k(k)
    checked_gain = check_gain(gain)
    check_option("discount", discount, DISCOUNT_NAMES, callable_ok=True)
    check_ignore_index(ignore_index)
    check_bool("validate_args", validate_args)
    return checked_k, checked_gain


def check_fraction(name: str, value: Any) -> Any:
    """``value`` is a real number in [0, 1]: returned as given."""
    if check_positive(name, value, allow_zero=True) > 1:
        raise ValueError(f"Expected `{name}` to be in [0, 1], but got {value!r}.")
    return value


def check_generator(name: str, generator: Any) -> Any:
    """``generator`` is ``None`` or a ``torch.Generator``: returned as given."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `{name}` to be a torch.Generator or None, but got {generator!r}."
        )
    return generator


def check_finite_scale(
    name: str, value: float, bound: float | Tensor, dtype: torch.dtype, *, count: int = 1
) -> None:
    """Raise naming ``name`` when ``bound * count``, bounding the loss and gradient, overflows.

    ``count`` is a whole number of terms (a power of the list length): where ``torch.compile``
    traces the length as a symbol, comparing it (an integer guard) keeps the graph whole, while
    float arithmetic on it would not. A tensor ``bound`` (computed on the device) is checked
    by a device-side assertion.
    """
    largest = torch.finfo(dtype).max
    if isinstance(bound, Tensor):
        message = _finite_scale_message(name, value, dtype, "past the largest float")
        assert_on_device(bound * count < largest, message)
    elif not (bound < largest and count <= math.floor(min(largest / bound, 2.0**62))):
        raise ValueError(_finite_scale_message(name, value, dtype, f"{bound * count:.3g}"))


def _finite_scale_message(name: str, value: float, dtype: torch.dtype, bound: str) -> str:
    """The error of `check_finite_scale`: written only where it is raised or asserted."""
    advice = f"choose a {'smaller' if name == 'sigma' else 'larger'} `{name}` or rescale"
    # A float that torch.compile traces as a symbol (dynamic=True) cannot be written out.
    shown = "this value" if torch.compiler.is_compiling() else repr(value)
    return (
        f"Expected `{name}` to keep the loss and its gradient finite in {dtype}, but got "
        f"{shown} (with this input they could reach {bound}); {advice} the scores."
    )


def check_weight_scale(
    bound: float | Tensor, weight: float | Tensor, dtype: torch.dtype, *, count: int = 1
) -> None:
    """Raise naming ``weight`` where ``bound * weight * count`` reaches the largest float.

    ``bound`` is a hyper-parameter's bound on the loss and its gradient (already checked by
    `check_finite_scale`), ``weight`` the largest real weight: where only the weights take it
    past, they are at fault. Read back with the input's checks (floats, on the CPU) it raises
    ``ValueError``; on the device (a tensor) it is a device-side assertion.
    """
    scale, largest = bound * weight, torch.finfo(dtype).max
    if isinstance(scale, Tensor):
        message = (
            f"Expected `weight` to keep the loss and its gradient finite in {dtype}, but its "
            "largest value is too large (with this input they could reach past the largest "
            "float); rescale `weight`."
        )
        assert_on_device(scale * count < largest, message)
    elif not scale * count < largest:  # read back: eager, so ``count`` is a plain int
        raise ValueError(
            f"Expected `weight` to keep the loss and its gradient finite in {dtype}, but its "
            f"largest value is {weight:.6g} (with this input they could reach "
            f"{scale * count:.3g}); rescale `weight`."
        )


# --- Arguments of other libraries -------------------------------------------------------------

# Argument names of torchmetrics, scikit-learn, TF-Ranking, allRank and LightGBM, and ours: what
# each of our functions says when it meets one (only names it has an equivalent for).
_CUTOFF_NAMES = {"top_k": "torchmetrics'", "topn": "TF-Ranking's", "eval_at": "LightGBM's"}


def _ported_names(cutoff: str, **others: str) -> dict[str, str]:
    """The cut-off names (``k``: ``cutoff``), those every entry point shares, and ``others``."""
    return {
        **{name: f"`k` ({peer} `{name}`; {cutoff})" for name, peer in _CUTOFF_NAMES.items()},
        "padded_value_indicator": "`ignore_index` (allRank's `padded_value_indicator`, e.g. -1)",
        "label_gain": "`gain`, which takes a sequence of per-label gains (LightGBM's `label_gain`)",
        **others,
    }


METRIC_PORTED_NAMES = _ported_names(
    "a sequence of cut-offs works",
    ignore_ties="`ties`='first' for scikit-learn's `ignore_ties=True` (on tie-free scores; "
    "'average', the default, for False)",
)
_LOSS_NAMES = _ported_names("one int", eps="nothing: no epsilon is needed (allRank's `eps`)")
LAMBDARANK_PORTED_NAMES = {
    **_LOSS_NAMES,
    "weighing_scheme": (
        "`weighting` (allRank's lambdaRank_scheme = 'lambdarank', ndcgLoss2_scheme = 'ndcg2', "
        "ndcgLoss2PP_scheme = 'ndcg2pp'; its RankNet and ndcgLoss1 schemes have no equivalent)"
    ),
}
APPROX_PORTED_NAMES = {
    **_LOSS_NAMES,
    "alpha": "`temperature`=1/alpha (allRank's approxNDCGLoss `alpha`)",
}
NEURAL_PORTED_NAMES = {
    **_LOSS_NAMES,
    "powered_relevancies": (
        "`gain` (allRank's `powered_relevancies=True` is gain='exponential', False is 'linear')"
    ),
    **{
        name: f"nothing: only the deterministic NeuralSort is implemented (allRank's `{name}`)"
        for name in ("stochastic", "n_samples", "beta", "log_scores")
    },
    "tau": "`temperature` (NeuralSort's `tau`)",
}
# Owners without an equivalent of a peer's name get no pointer to it: the catalog takes no
# `ignore_index` (its lists are the catalog), the debiased loss no `weighting`.
CATALOG_PORTED_NAMES = {
    name: hint for name, hint in METRIC_PORTED_NAMES.items() if name != "padded_value_indicator"
}
UNBIASED_PORTED_NAMES = _LOSS_NAMES  # LambdaRank's but `weighing_scheme`


def unexpected_keyword(owner: str, name: str, ported: Mapping[str, str]) -> TypeError:
    """The error for keyword ``name``, which ``owner`` does not take.

    A name of another library that ``owner`` has an equivalent for (``ported``: one of
    `METRIC_PORTED_NAMES`, `LAMBDARANK_PORTED_NAMES`, ...) gets a pointer to it.
    """
    pointer = f": did you mean {ported[name]}?" if name in ported else "."
    return TypeError(f"`{owner}` got an unexpected keyword argument `{name}`{pointer}")


def reject_ported_names(owner: str, arguments: Mapping[str, Any], ported: dict[str, str]) -> None:
    """Raise `unexpected_keyword` for the first of ``arguments`` that is in ``ported``.

    For the metrics, whose other keywords go on to torchmetrics' ``Metric``.
    """
    for name in arguments:
        if name in ported:
            raise unexpected_keyword(owner, name, ported)


_Result = TypeVar("_Result")
_Options = ParamSpec("_Options")


def names_ported_keywords(
    ported: Mapping[str, str],
) -> Callable[[Callable[_Options, _Result]], Callable[_Options, _Result]]:
    """Decorate a public function or ``__init__`` so that a keyword it lacks raises ours.

    Python's own ``TypeError`` for an unexpected keyword becomes `unexpected_keyword`'s, which
    names the owner (the function, or the class of ``self``) and, for a name of another
    library, ours. Nothing is done before the call: a ``TypeError`` from the call is looked at
    only when it is raised, and only where a keyword given is none of the parameters (then it
    is Python's, raised before the body ran); any other is raised as it is.
    `functools.wraps` keeps the function's signature for ``inspect.signature`` and ``help()``.
    """

    def decorate(function: Callable[_Options, _Result]) -> Callable[_Options, _Result]:
        parameters = inspect.signature(function).parameters
        is_init = function.__name__ == "__init__"

        @functools.wraps(function)
        def checked(*args: _Options.args, **kwargs: _Options.kwargs) -> _Result:
            try:
                return function(*args, **kwargs)
            except TypeError:
                unknown = [name for name in kwargs if name not in parameters]
                if not unknown:
                    raise
                owner = type(args[0]).__name__ if is_init else function.__qualname__
                raise unexpected_keyword(owner, unknown[0], ported) from None

        return checked

    return decorate


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


def check_paired_values(
    name: str, values: Any, ids: Tensor | None, like: Tensor | None = None
) -> None:
    """``values`` is a 1-D floating tensor: per-query values, one per id when ids are given.

    Values and ids lie on the device of ``a``'s values: ``like``, where these are ``b``'s
    (``None`` where these are ``a``'s).
    """
    check_click_tensor(name, values, kind="floating")
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
    if like is not None:
        check_same_device(name, values, like, "a")
    check_same_device(f"{name}[1]", ids, values if like is None else like, "a")


def check_query_ids(name: str, ids: Any, *, scalar_hint: str = "") -> None:
    """``ids`` is a 1-D integer tensor of query ids; ``scalar_hint`` ends the error on a 0-D one."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"Expected `{name}` (query ids) to be a torch.Tensor, but got {ids!r}.")
    if not is_integer_tensor(ids):
        raise TypeError(
            f"Expected `{name}` (query ids) to be an integer tensor, but got dtype {ids.dtype}."
        )
    if ids.ndim != 1:
        raise ValueError(
            f"Expected `{name}` (query ids) to be 1-D, but got shape {tuple(ids.shape)}"
            f"{scalar_hint if ids.ndim == 0 else ''}."
        )


def check_rows_by_query(query_ids: Any, values: tuple[Any, ...], padding_value: Any) -> None:
    """``query_ids`` are query ids (`check_query_ids`); each of ``values`` a row per id.

    ``padding_value`` is ``None`` (the default, -1: for values of signed dtypes only, as an
    unsigned or bool one would pad with a real label) or a number that each value's dtype holds
    (no -1 wrapped to 255 in uint8 or to ``True`` in bool, no 0.5 truncated to 0, no float16
    overflow to inf).
    """
    check_query_ids("query_ids", query_ids)
    if padding_value is not None and not isinstance(padding_value, numbers.Real):
        raise TypeError(f"Expected `padding_value` to be a real number, but got {padding_value!r}.")
    fill: Any = padding_value  # a float, an int or a numpy number
    for i, value in enumerate(values):
        if not isinstance(value, Tensor):
            raise _not_a_tensor(f"values[{i}]", value)
        if value.ndim == 0 or value.shape[0] != query_ids.numel():
            raise ValueError(
                f"Expected `values[{i}]` to have a row per query id ({query_ids.numel()} rows), "
                f"but got shape {tuple(value.shape)}."
            )
        if value.device != query_ids.device:
            raise ValueError(
                f"Expected `values[{i}]` on the device of `query_ids` ({query_ids.device}), "
                f"but got {value.device}."
            )
        dtype = value.dtype
        if padding_value is None and not dtype.is_signed:
            raise ValueError(
                f"Expected `values[{i}]` of a dtype that holds the default padding -1, but got "
                f"{dtype}: its padding would read as real items with label 0 wherever the `mask` "
                "is forgotten. Convert it (`.long()`), or pass `padding_value=0` and give the "
                "lists the returned `mask`."
            )
        if padding_value is not None and not (
            (not math.isfinite(fill) or abs(fill) <= torch.finfo(dtype).max)
            if dtype.is_floating_point or dtype.is_complex
            else float(fill).is_integer() and label_dtype_holds(dtype, int(fill))
        ):
            raise ValueError(
                f"Expected `padding_value` to be a value of {dtype} (the dtype of `values[{i}]`), "
                f"but got {padding_value!r}."
            )


def check_trec_source(name: str, source: Any) -> None:
    """``source`` is a ``{query: {doc: value}}`` table or the path of a TREC file."""
    if not isinstance(source, (Mapping, str, os.PathLike)):
        raise TypeError(
            f"Expected `{name}` as {{query: {{doc: value}}}} or the path of a TREC file, but got "
            f"{type(source).__name__}."
        )


def check_trec_tables(run: Mapping[Any, Any], qrels: Mapping[Any, Any]) -> None:
    """``run`` maps queries to ``{doc: score}`` (real, not NaN), ``qrels`` to integer grades.

    Any real number (numpy's too) is a score; a grade is an integer, as trec_eval and
    pytrec_eval read them, or a float of integer value (``1.0``, as JSON and pandas give
    them). NaN is no score: in `from_trec`'s rows it marks judged documents not retrieved.
    """
    tables = (("run", run, "score"), ("qrels", qrels, "grade"))
    for name, table, noun in tables:
        for query, docs in table.items():
            if not isinstance(docs, Mapping):
                raise TypeError(
                    f"Expected `{name}` as {{query: {{doc: {noun}}}}}, but query {query!r} maps "
                    f"to {type(docs).__name__}."
                )
            for doc, value in docs.items():
                if not isinstance(value, numbers.Real):
                    raise TypeError(
                        f"Expected each {noun} in `{name}` to be a real number, but query "
                        f"{query!r} gives document {doc!r} {value!r} ({type(value).__name__})."
                    )
                integral = isinstance(value, numbers.Integral)  # (any size: no float)
                if not integral and math.isnan(value):
                    raise ValueError(
                        f"Expected `{name}` {noun}s without NaN, but query {query!r} gives "
                        f"document {doc!r} NaN."
                    )
                number = int(value) if isinstance(value, numbers.Integral) else float(value)
                whole = integral or float(number).is_integer()  # (inf is not)
                if name == "qrels" and not (whole and -(2**63) <= number < 2**63):
                    raise ValueError(
                        f"Expected integer grades in `qrels` (int64 ones), as trec_eval reads "
                        f"them, but query {query!r} gives document {doc!r} {_shortened(value)}."
                    )
                if integral and abs(number) >= _FLOAT64_OVERFLOW:  # (inf is a float score)
                    raise ValueError(
                        f"Expected `run` scores that a float64 holds, but query {query!r} gives "
                        f"document {doc!r} {_shortened(value)}."
                    )


# The smallest integer that no float64 holds: float() of it overflows (rounding to even).
_FLOAT64_OVERFLOW = 2**1024 - 2**970


def _shortened(value: Any) -> str:
    """``repr(value)``, its middle cut out past 40 characters (an int of 400 digits)."""
    shown = repr(value)
    return shown if len(shown) <= 40 else f"{shown[:18]}...{shown[-18:]}"


def check_shared_queries(
    query_ids: Sequence[Any], run: Mapping[Any, Any], qrels: Mapping[Any, Any]
) -> None:
    """``query_ids``, the run's queries with a judged document, are not none (a few named)."""
    if query_ids:
        return

    def some(ids: Sequence[Any]) -> str:
        return f"{list(ids[:3])}{' ...' if len(ids) > 3 else ''} ({len(ids)})"

    judged = [query for query in qrels if qrels[query]]
    raise ValueError(
        "Expected the run and the qrels to share a query with judged documents, but they share "
        f"none: the run's queries are {some(list(run))}, the qrels' judged queries "
        f"{some(judged)}."
    )


def check_padded(padded: Any, slots: Any) -> None:
    """``padded`` is ``[Q, L, ...]`` lists and ``slots`` the 1-D integer positions of rows in it."""
    if not isinstance(padded, Tensor):
        raise _not_a_tensor("padded", padded)
    if padded.ndim < 2:
        raise ValueError(
            f"Expected `padded` to be [Q, L, ...] lists, but got shape {tuple(padded.shape)}."
        )
    if not (isinstance(slots, Tensor) and is_integer_tensor(slots) and slots.ndim == 1):
        got = f"{slots.dtype} {tuple(slots.shape)}" if isinstance(slots, Tensor) else slots
        raise TypeError(f"Expected `slots` to be a 1-D integer tensor, but got {got!r}.")
    check_same_device("slots", slots, padded, "padded")


def slots_outside(slots: Tensor, size: int) -> ValueError:
    """The error of ``slots`` with positions outside ``[0, size)`` (a few named)."""
    bad = slots[(slots < 0) | (slots >= size)]
    shown = f"{bad[:5].tolist()}{' ...' if bad.numel() > 5 else ''}"
    return ValueError(
        f"Expected `slots` in [0, {size}) (positions in the {size} slots of `padded`, as "
        f"`pad_by_query` returned them), but got {bad.numel()} outside: {shown}."
    )


def check_resampling(
    n_resamples: Any, seed: Any, names: tuple[str, str] = ("n_resamples", "seed")
) -> None:
    """``n_resamples`` is a positive int, ``seed`` an int; ``names`` are the arguments' names."""
    count_name, seed_name = names
    if not _is_int(n_resamples):
        raise TypeError(f"Expected `{count_name}` to be an int, but got {n_resamples!r}.")
    if n_resamples < 1:
        raise ValueError(f"Expected `{count_name}` to be positive, but got {n_resamples}.")
    if not _is_int(seed):
        raise TypeError(f"Expected `{seed_name}` to be an int, but got {seed!r}.")


# --- Checks of the metric classes' own arguments ------------------------------------------------


def check_aggregation(
    aggregation: Any, confidence: float | None, resamples: Any, seed: Any
) -> None:
    """``aggregation`` is one of `AGGREGATIONS` or a callable (as torchmetrics').

    It must aggregate where there is a ``confidence``; the bootstrap's ``resamples`` and
    ``seed`` are checked too.
    """
    check_option("aggregation", aggregation, AGGREGATIONS, callable_ok=True)
    if confidence is not None and aggregation == "none":
        raise ValueError(
            "Expected an aggregated `aggregation` with `confidence` (the interval is of the "
            "aggregate: 'mean', 'median', 'min', 'max' or a callable), but got "
            "`aggregation`='none'."
        )
    check_resampling(resamples, seed, ("bootstrap_resamples", "bootstrap_seed"))


def check_bool(name: str, value: Any) -> None:
    """``value`` is a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but got {value!r}.")


def check_row_metadata(preds: Any, target: Any, indexes: Any) -> None:
    """Types, dtypes and shapes of flat query rows: always checked (nothing is read back).

    ``indexes`` is an integer tensor of the shape of ``preds``.
    """
    check_preds_target(preds, target, rows=True)
    dtype_ok = isinstance(indexes, Tensor) and is_integer_tensor(indexes)
    expected = "be an integer (int64) tensor, but got dtype"
    wrong = None if dtype_ok else expected
    _check_tensor("indexes", indexes, preds, "an int64 torch.Tensor", wrong, "preds")


def check_device(preds: Tensor, device: torch.device, name: str = "preds") -> None:
    """``preds`` (argument ``name``) lie on the metric's ``device`` (that of its states).

    A metric is moved whole; the other tensors of a call are checked against ``preds``.
    """
    if preds.device != device:
        raise ValueError(
            f"Expected `{name}` on the metric's device {device}, but got {preds.device}; move "
            "the metric with `.to(device)` (or the input to its device)."
        )


# The options every rank of `torch_ndcg.NDCG` must share (`check_same_options_on_every_rank`).
_RANK_OPTIONS = (
    "`k`, `confidence`, gain, discount, `ties`, `empty_target_action` and `ignore_index`"
)


def check_same_options_on_every_rank(
    same: Tensor | bool, owner: str, key: Tensor, options: str = _RANK_OPTIONS
) -> None:
    """Raise where ``same`` (from a sync: a bool scalar tensor, or a bool read back) says no.

    Every rank gets the same ``same`` from the same collective: all raise together. A tensor on
    the CPU: a read-back and a ``ValueError``; on an accelerator a device-side assertion (no
    read-back). A bool (read back with the other values of a sync): a ``ValueError``.
    ``key`` is this rank's options digest, named in the message; ``options`` names the
    options that must be equal.
    """
    advice = f"build `{owner}` with the same {options} on every rank."
    if isinstance(same, Tensor) and not _host.may_read_back(same.device):
        assert_on_device(
            same, f"Expected the same options on every rank, but they differ: {advice}"
        )
        return
    if not bool(same):
        raise ValueError(
            "Expected the same options on every rank, but this rank's options digest "
            f"{key.tolist()} differs from another rank's: {advice}"
        )


def check_rows(
    preds: Tensor,
    target: Tensor,
    indexes: Tensor,
    options: ListOptions,
    *,
    scores: Tensor | None = None,
    retrieved: Tensor | None = None,
) -> Tensor | None:
    """The value checks of flat query rows (see `check_row_metadata`); the mask of rows to keep.

    ``options`` are checked (their gain, ``ignore_index`` and ``validate_args`` apply).
    ``scores`` are the flat scores as they will be scored (the metric's stored dtype, whose
    gain limit applies), ``preds`` flattened by default; those of rows not ``retrieved``
    (checked by `check_mask`) are not read. Each row's gain is checked alone
    (as a list of one): a query may span batches, its sum is checked when it is scored. One
    read-back on the CPU, none elsewhere.

    Returns:
        The flat mask of rows whose label is not ``ignore_index`` (``None``: every row).
    """
    check_mask(retrieved, preds, "retrieved")
    flat_target = target.reshape(-1)
    real = real_items(flat_target, None, options.ignore_index)
    if options.validate_args:
        # Rows as lists of one item: each row's gain is checked alone.
        rows = (preds.reshape(-1) if scores is None else scores).reshape(-1, 1)
        ranked = None if retrieved is None else retrieved.reshape(-1, 1)
        real_rows = None if real is None else real.reshape(-1, 1)
        check = check_values(rows, flat_target.reshape(-1, 1), real_rows, options, False, ranked)
        if check is not None:
            check.resolve()
    return real


def check_no_empty_target(empty: Tensor, noun: str) -> None:
    """Raise for ``empty_target_action="error"`` where a ``noun`` (list, query, user) is empty.

    ``empty`` (bool, any shape) marks those with no relevant item (ideal DCG 0). One read-back
    on the CPU; a device-side assertion elsewhere (`resolve_checks`).
    """
    message = (
        f"Found a {noun} with no relevant item (ideal DCG = 0) and `empty_target_action`='error'."
    )
    resolve_checks([Check(~empty.any(), None, message)])


def check_lists(
    preds: Any,
    target: Any,
    mask: Any,
    options: Any,
    *,
    finite_preds: bool = False,
    retrieved: Tensor | None = None,
) -> tuple[Tensor | None, DeferredCheck | None]:
    """Every per-call check of a ``[..., L]`` entry point, with its checked ``options``.

    Types, dtypes and shapes are always checked (they read nothing back); with
    ``validate_args=False`` the value checks are skipped (``options`` give it, the ``gain`` and
    ``ignore_index``). ``finite_preds`` as in `check_values`; the scores of items not
    ``retrieved`` are not read.

    Returns:
        The mask of real items (``None``: all real), retrieved or not, and the value checks
        still to be read back (see `check_values`), or ``None`` (not validated, an empty input,
        or checked on the device).
    """
    check_preds_target(preds, target)
    check_mask(mask, preds)
    check_mask(retrieved, preds, "retrieved")
    real = real_items(target, mask, options.ignore_index)
    if not options.validate_args:
        return real, None
    if callable(options.discount):  # named discounts need no check (and no Python call)
        check_discount(options, preds.shape[-1], preds.dtype)
    return real, check_values(preds, target, real, options, finite_preds, retrieved)


# --- Learning from clicks: weights, display positions, click values ---------------------------


class Check(NamedTuple):
    """One value check, as every surface states it; `resolve_checks` judges them.

    Attributes:
        ok: whether the input passes it: a bool scalar tensor (still on the device: read
            back, or asserted there) or a bool (known on the host).
        found: what stands for ``{found}`` in ``message``: a text as it is, a number by its
            ``repr``, a scalar tensor by its value read back (an integer without ``.0``);
            where nothing is read back (an accelerator, ``torch.compile``) a tensor or
            ``None`` reads "a value".
        message: the ``ValueError``, with ``{found}`` where it names what was found.
    """

    ok: Tensor | bool
    found: Tensor | float | str | None
    message: str


def _shown(found: Any, read: bool = False) -> str:
    """``found`` as `Check.message` names it (``read``: a float read back from a tensor)."""
    if isinstance(found, str):
        return found
    if found is None or isinstance(found, Tensor):
        return "a value"
    whole = read and math.isfinite(found) and found.is_integer()
    return repr(int(found) if whole else found)


def defer(checks: Sequence[Check]) -> DeferredCheck | None:
    """``checks``, in order, as one `DeferredCheck` of their pending tensors.

    Where a value may be read back (the CPU, eager) its judge raises the first failed
    ``message`` and returns what each check found (with no tensor pending: judged now, and
    ``None`` returned); elsewhere each pending check is a device-side assertion, a known
    failure raises now, and ``None`` is returned.
    """
    pending = [ok for ok, _, _ in checks if isinstance(ok, Tensor)]
    if pending and not _host.may_read_back(pending[0].device):
        for ok, found, message in checks:
            if isinstance(ok, Tensor):
                assert_on_device(ok, message.format(found=_shown(found)))
            elif not ok:
                raise ValueError(message.format(found=_shown(found)))
        return None
    if not pending:
        _judge(checks, [])
        return None
    # Each pending check reads back its ``ok`` and what it found (``ok`` again where it is no
    # tensor: nothing to read).
    values = [
        value.to(torch.float64)
        for ok, found, _ in checks
        if isinstance(ok, Tensor)
        for value in (ok, found if isinstance(found, Tensor) else ok)
    ]
    stacked = torch.stack(values)
    return DeferredCheck(stacked, functools.partial(_judge, checks))


def _judge(checks: Sequence[Check], read: list[float]) -> list[Any]:
    """What each of ``checks`` found, its pending values ``read`` back; raise the first failed."""
    found_values, at = [], 0
    for ok, found, message in checks:
        from_tensor = isinstance(found, Tensor)
        passed: Any = ok
        if isinstance(ok, Tensor):
            passed, found, at = read[at], read[at + 1] if from_tensor else found, at + 2
        if not passed:
            raise ValueError(message.format(found=_shown(found, from_tensor)))
        found_values.append(found)
    return found_values


def resolve_checks(*checks: DeferredCheck | Sequence[Check] | None) -> list[Any]:
    """Judge ``checks`` in order from one read-back of all their values; each one's result.

    The one resolver: statements of `Check` are deferred (`defer`) first. Judged in order, the
    first to fail raises: the order of their device-side assertions, so that both name the
    same error. ``None`` for a check that is ``None`` (or asserted on the device).
    """
    deferred = [c if c is None or isinstance(c, DeferredCheck) else defer(c) for c in checks]
    read = _host.read_together([None if c is None else c.values for c in deferred])
    return [None if c is None else c.judge(v) for c, v in zip(deferred, read, strict=True)]




def check_click_tensor(
    name: str, value: Any, like: Tensor | None = None, *, kind: str, of: str = "preds"
) -> Tensor:
    """``value`` is a tensor of a ``kind`` dtype (``"floating"``, ``"integer"``) like ``like``.

    ``like`` is the argument ``of`` (``preds``), whose shape and device ``value`` has
    (``None``: any).
    """
    floating = kind == "floating"
    dtype_ok = isinstance(value, Tensor) and (
        value.is_floating_point() if floating else is_integer_tensor(value)
    )
    expected = f"be {'a' if floating else 'an'} {kind} tensor, but got dtype"
    return _check_tensor(name, value, like, "a torch.Tensor", None if dtype_ok else expected, of)


def check_click_simulation(
    target: Any, positions: Any, mask: Any, examination: Any, noise: Any, max_label: Any
) -> tuple[float, Tensor]:
    """The input of `torch_ndcg.simulate_clicks`, checked in one read-back.

    Types, shapes and devices, then the labels of the real items in ``[0, max_label]``, the
    positions (`check_positions`) and ``examination``'s probabilities in [0, 1].

    Returns:
        ``noise`` as a float, and the labels of the real items in the default float dtype (0 on
        padding), as the checks read them.
    """
    is_number = isinstance(noise, numbers.Real) and not isinstance(noise, bool)
    if not (is_number and 0 <= noise <= 1):
        raise ValueError(f"Expected `noise` to be a float in [0, 1], but got {noise!r}.")
    check_positive("max_label", max_label)
    if not isinstance(target, Tensor):
        raise TypeError(f"Expected `target` to be a torch.Tensor, but got {type(target).__name__}.")
    if target.ndim == 0:
        raise ValueError("Expected `target` to have a list dimension, but got a 0-d tensor.")
    check_mask(mask, target, of="target")
    n_positions = None
    if examination is not None:
        if not (isinstance(examination, Tensor) and examination.is_floating_point()):
            raise TypeError(
                "Expected `examination` to be a floating torch.Tensor of probabilities per "
                f"position, or None, but got {examination!r}."
            )
        if examination.ndim != 1 or examination.numel() == 0:
            raise ValueError(
                "Expected `examination` to be 1-D and non-empty (one probability per position), "
                f"but got shape {tuple(examination.shape)}."
            )
        check_same_device("examination", examination, target, "target")
        n_positions = examination.numel()
    checks = check_positions(positions, target, n_positions, mask, of="target")
    labels = target.to(torch.get_default_dtype())
    real_labels = labels if mask is None else torch.where(mask, labels, 0)
    low, high = torch.aminmax(real_labels) if labels.numel() else (labels.sum(), labels.sum())
    label_message = (
        f"Expected `target` to be in [0, {max_label}] (`max_label`), but found {{found}}."
    )
    checks.append(Check(low >= 0, low, label_message))
    checks.append(Check(high <= max_label, high, label_message))
    if examination is not None:
        low_p, high_p = torch.aminmax(examination)
        message = "Expected `examination` to hold probabilities in [0, 1], but found {found}."
        checks.append(Check(low_p >= 0, low_p, message))
        checks.append(Check(high_p <= 1, high_p, message))
    resolve_checks(checks)
    return float(noise), real_labels


def check_score_span(
    span: float | Tensor, length: int, count: int, largest_weight: Any, dtype: torch.dtype
) -> None:
    """``count`` terms of at most the scores' ``span`` plus log L each stay finite in ``dtype``.

    Times the largest weight too, where one is given (``largest_weight``, else ``None``): then
    ``weight`` is named (`check_weight_scale`).
    """
    bound, limit = span + math.log(length), torch.finfo(dtype).max / count
    if isinstance(bound, Tensor) or not bound < limit:  # the message is made where it is used
        message = f"Expected `preds` to keep the loss finite in {dtype}, but the scores "
        if isinstance(bound, Tensor):
            assert_on_device(bound < limit, message + "span too much; rescale them.")
        else:
            raise ValueError(message + f"span {span:.3g}; rescale them.")
    if largest_weight is not None:
        check_weight_scale(bound + 1, largest_weight, dtype, count=count)


def check_finite_scores(scores: Tensor) -> None:
    """The scores (padding replaced) are finite: one read-back on the CPU, else on the device."""
    if scores.numel() > 0:
        largest = scores.abs().amax()
        message = "Expected `preds` to be finite on real items, but found {found}."
        resolve_checks([Check(largest < torch.inf, largest, message)])


def noise_checks(
    noise: Any, preds: Tensor, target: Tensor, mask: Any, options: Any
) -> DeferredCheck | None:
    """XE-NDCG's ``noise``: ``None``, or a floating tensor like ``preds``, in [0, 1] on real items.

    Its value check (with ``validate_args``) is returned deferred, to be read with the input's
    and judged before them (`torch_ndcg._host.DeferredCheck`); ``None`` where there is none.
    """
    if noise is None:
        return None
    check_preds_target(preds, target)
    check_mask(mask, preds)
    check_click_tensor("noise", noise, preds, kind="floating")
    if not options.validate_args or noise.numel() == 0:
        return None
    real = real_items(target, mask, options.ignore_index)
    found = noise.detach()
    low, high = torch.aminmax(found if real is None else found.where(real, 0))
    message = "Expected `noise` to be in [0, 1] on real items, but found {found}."
    return defer([Check((low >= 0) & (high <= 1), low.where(low < 0, high), message)])


def check_click_counts(
    scores: Tensor, real: Tensor, given: tuple[Tensor, Tensor], mask: Tensor | None
) -> None:
    """The value checks of `UnbiasedLambdaRankLoss.aggregated`, each naming the argument at fault.

    The scores of the items ranked (``real``), then the counts ``given`` (clicks, views) of the
    real items (``mask``; those of an item without views too: negative views would drop it
    from the ranking unnoticed): no NaN, finite and non-negative, clicks at most views. One
    read-back on the CPU, device-side assertions elsewhere, before anything is computed or
    learnt.
    """
    counts = torch.stack(given)  # clicks, views: [2, N, L, n]
    if mask is not None:
        counts = counts.masked_fill(~mask[None, :, :, None], 0)
    low, high = counts.reshape(2, -1).aminmax(dim=1)  # both NaN where a count is
    # Rows `preds` (the scores ranked: inf and -inf where there are none), `clicks`, `views`.
    low = torch.cat([torch.where(real, scores, torch.inf).amin()[None], low])
    high = torch.cat([torch.where(real, scores, -torch.inf).amax()[None], high])
    floor = low.new_tensor([-torch.finfo(scores.dtype).max, 0, 0])
    found = torch.where(low < floor, low, high)
    excess = (counts[0] - counts[1]).amax()
    ok = "non-negative and finite"
    rows = [("preds", "scores", "finite"), ("clicks", "counts", ok), ("views", "counts", ok)]
    checks = []
    for row, (name, noun, expected) in enumerate(rows):
        nan = f"Expected `{name}` to contain no NaN, but found NaN {noun}."
        bad = f"Expected `{name}` to be {expected}, but found {{found}}."
        within = (low[row] >= floor[row]) & (high[row] < torch.inf)
        checks += [Check(low[row] == low[row], low[row], nan), Check(within, found[row], bad)]
    above = "Expected `clicks` to be at most `views`, but found clicks above views by {found}."
    checks.append(Check(~(excess > 0), excess, above))  # NaN (inf - inf): named by the checks above
    resolve_checks(checks)


def check_weight(
    weight: Any, preds: Tensor, real: Tensor | None, *, validate_args: bool
) -> DeferredCheck | None:
    """``weight`` is ``None`` or a floating tensor like ``preds``, finite and >= 0 on real items.

    Padded items' weights are not checked: they never count.

    Returns:
        Where a read-back is allowed, the check, whose result is the largest real weight (0
        where there is none): the bounds of a loss grow by it (`check_weight_scale`); else
        ``None`` (device-side assertions, or nothing to check).
    """
    if weight is None:
        return None
    check_click_tensor("weight", weight, preds, kind="floating")
    if not validate_args or weight.numel() == 0:
        return None
    real_weight = weight if real is None else torch.where(real, weight, 0)
    low, high = torch.aminmax(real_weight.detach())  # both NaN where one is
    checks = defer(
        [
            Check(low == low, low, "Expected `weight` to contain no NaN, but found {found}."),
            Check(high < torch.inf, high, "Expected `weight` to be finite, but found {found}."),
            Check(low >= 0, low, "Expected `weight` to be non-negative, but found {found}."),
        ]
    )
    # Its result: what the second check found, the largest real weight.
    return None if checks is None else DeferredCheck(checks.values, lambda r: checks.judge(r)[1])


def _none_bad(bad: Tensor, values: Tensor, message: str) -> list[Check]:
    """The value check that no ``values`` are ``bad``; it finds the bad one of largest magnitude.

    Gathered as a 0-d tensor (no read-back), 0 where none is bad.
    """
    found = torch.where(bad, values, 0).flatten()
    return [Check(~bad.any(), found.gather(0, found.abs().argmax().reshape(1))[0], message)]


def check_positions(
    positions: Any,
    like: Tensor | None,
    num_positions: int | None,
    real: Tensor | None,
    *,
    validate_args: bool = True,
    of: str = "preds",
) -> list[Check]:
    """``positions`` is an integer tensor like ``like``; its value checks on real items.

    ``like`` is the argument ``of`` (``preds``), whose shape and device ``positions`` has
    (``None``: any). A real item's position is `NOT_SHOWN` or in ``[0, num_positions)``
    (``None``: no bound).
    """
    check_click_tensor("positions", positions, like, kind="integer", of=of)
    if not validate_args or positions.numel() == 0:
        return []
    real_positions = positions if real is None else torch.where(real, positions, NOT_SHOWN)
    bad = real_positions < NOT_SHOWN  # the one negative position allowed is NOT_SHOWN, -1
    expected = "non-negative"
    if num_positions is not None:
        bad = bad | (real_positions >= num_positions)
        expected = f"in [0, {num_positions}) (`num_positions`={num_positions})"
    message = (
        f"Expected `positions` to be {expected}, or {NOT_SHOWN} for an item not shown, but "
        "found {found}."
    )
    return _none_bad(bad, real_positions, message)


def check_binary(name: str, values: Tensor, real: Tensor | None) -> list[Check]:
    """The value check that ``values`` are 0 or 1 on real items (none for bool tensors)."""
    if values.dtype == torch.bool or values.numel() == 0:
        return []
    real_values = values if real is None else torch.where(real, values, 0)
    bad = (real_values != 0) & (real_values != 1)
    message = f"Expected `{name}` to be 0 or 1 (a click or none), but found {{found}}."
    return _none_bad(bad, real_values, message)


# --- The catalog: embeddings, relevant and excluded items ---------------------------------------

_INT64_MAX = torch.iinfo(torch.int64).max
# What `relevant` and `exclude` may be, as their errors name it.
_ITEM_KINDS = {
    "relevant": "a sparse [B, N] tensor of grades or an integer [B, P] tensor of item ids",
    "exclude": (
        "a bool [B, N] tensor, a sparse [B, N] tensor or an integer [B, E] tensor of item ids"
    ),
}


def check_items(
    value: Any, name: str, like: Tensor, n_items: int | None, of: str = "preds"
) -> None:
    """``relevant`` or ``exclude`` (``name``) of the users of ``like``, on its device (``of``).

    Item ids: an integer ``[B, P]`` tensor; else a sparse COO/CSR ``[B, N]`` tensor (or a dense
    bool one for ``exclude``) of ``n_items`` columns (``None``: any); ``B`` is ``like``'s rows.
    """
    users = like.shape[0]
    if not isinstance(value, Tensor):
        raise TypeError(
            f"Expected `{name}` as {_ITEM_KINDS[name]}, but got {type(value).__name__}."
        )
    if value.layout == torch.strided and not (name == "exclude" and value.dtype == torch.bool):
        if value.is_floating_point() or value.dtype == torch.bool or value.dim() != 2:
            got = f"{value.dtype} of shape {tuple(value.shape)}"
            if name == "relevant":
                one_id = value.dim() == 1 and is_integer_tensor(value)
                how = "one item id per user as `relevant[:, None]`"
                how = how if one_id else "a dense grade matrix as `relevant.to_sparse()`"
                got = f"a dense {value.dtype} tensor of shape {tuple(value.shape)}; pass {how}"
            raise TypeError(f"Expected `{name}` as {_ITEM_KINDS[name]}, but got {got}.")
        if value.shape[0] != users:
            raise ValueError(
                f"Expected `{name}` with {users} rows (one per user), but got {value.shape[0]}."
            )
        check_same_device(name, value, like, of)
        return
    if value.dim() != 2 or value.shape[0] != users or n_items not in (None, value.shape[1]):
        expected = f"[{users}, {'N' if n_items is None else n_items}]"
        raise ValueError(
            f"Expected `{name}` of shape {expected} (users x catalog items), "
            f"but got {tuple(value.shape)}."
        )
    if value.layout not in (torch.strided, torch.sparse_coo, torch.sparse_csr):
        raise ValueError(
            f"Expected `{name}` as a sparse COO or CSR tensor, a dense tensor or item ids, "
            f"but got the layout {value.layout}."
        )
    check_same_device(name, value, like, of)


def item_id_checks(ordered: Tensor, limit: int, both: Tensor | None = None) -> list[Check]:
    """The checks of ``[B, P]`` ascending ids: in ``[0, limit)``, each once per user.

    Relevant ids (``both`` is ``None``; padding ``-1``) or excluded ids (padding the int64
    maximum), whose ``both`` marks the relevant items among them: there must be none.
    """
    name = "relevant" if both is None else "excluded"
    real = ordered.ge(0) if both is None else ordered.lt(_INT64_MAX)
    outside = f"Expected the {name} item ids in [0, {limit}), but one is outside."
    twice = f"Expected each {name} item once per user, but a user lists an item twice."
    checks = [Check(~(real & ordered.ge(limit)).any(), None, outside)]
    repeated = ordered[:, 1:].eq(ordered[:, :-1]) & real[:, 1:]
    checks.append(Check(~repeated.any(), None, twice))
    if both is not None:
        message = (
            "Expected no item both relevant and excluded, but a user has one: an excluded item "
            "takes no rank, so it cannot be found."
        )
        checks.append(Check(~both.any(), None, message))
    return checks


_UNANSWERED = object()  # what `_cpu_answer` gives where the callable cannot answer on the CPU


def _cpu_answer(function: Callable[[Tensor], Any], probe: Tensor) -> Any:
    """What a callable gain or discount gives a CPU ``probe``, or `_UNANSWERED`.

    It cannot answer on the CPU where it raises there (it holds another device's tensors, say)
    or answers on another device: then it meets the input on the input's device, unchecked.
    """
    try:
        given = function(probe)
    except Exception:
        return _UNANSWERED
    if isinstance(given, Tensor) and given.device != probe.device:
        return _UNANSWERED
    return given


def check_discount(options: Any, length: int | None, dtype: torch.dtype) -> None:
    """A callable ``discount`` of ``options`` gives the ranks that count discounts fit for nDCG.

    The ranks that count are those the engine discounts in lists of ``length`` items: every
    rank of a loss's lists, the ranks up to the largest cut-off of a metric's (``length``
    ``None``, as for a catalog of unknown size: up to the largest cut-off, no check without
    one). The discounts must be a tensor of the ranks' shape, finite and non-negative,
    positive at rank 1 and never growing with the rank (beyond rounding): then sorting by gain
    gives the ideal DCG, and nDCG is at most 1.

    Ranks are no input data: they are made and read on the CPU, in the compute dtype of
    ``dtype`` (no read-back of the input). A discount that cannot take CPU ranks (it holds
    tensors of another device, say) or answers on another device is left unchecked, as are
    named discounts and a graph that ``torch.compile`` traces.
    """
    discount = options.discount
    if not callable(discount) or torch.compiler.is_compiling():
        return
    if isinstance(options, ListOptions):
        if length is None:
            length = max(options.cutoffs.ks or (0,))
        else:
            length = options.cutoffs.resolve(length)[1]
    if not length:
        return
    dtype = _options.compute_dtype(dtype)
    ranks = torch.arange(1, length + 1, dtype=dtype)
    given = _cpu_answer(discount, ranks)
    if given is _UNANSWERED:
        return
    if not (isinstance(given, Tensor) and given.shape == ranks.shape):
        found = f"shape {tuple(given.shape)}" if isinstance(given, Tensor) else type(given)
        raise ValueError(
            "Expected `discount` to give a tensor of the shape of the ranks it is given, "
            f"({length},), but it gave {found}."
        )
    values = given.detach().to("cpu", torch.float64)
    slack = 1 + 8 * torch.finfo(dtype).eps  # a decreasing formula may round up by an ulp
    bad = ~(values.isfinite() & (values >= 0))
    bad[0] |= values[0] == 0
    bad[1:] |= values[1:] > values[:-1] * slack
    if bool(bad.any()):
        rank = int(bad.nonzero()[0, 0]) + 1
        raise ValueError(
            "Expected `discount` to give finite, non-negative discounts, positive at rank 1 "
            "and never growing with the rank (then nDCG is at most 1), but it gave "
            f"{values[rank - 1].item():.6g} at rank {rank}"
            + (f" after {values[rank - 2].item():.6g}." if rank > 1 else ".")
        )


def check_absent_gain(options: Any, dtype: torch.dtype) -> None:
    """Label 0 gains nothing: a sparse or catalog target's absent items are label 0, unscored.

    Named gains give 0 there; a table's first entry must be 0 too, and so must a callable's
    gain of a zero label where the options validate (in the compute dtype of ``dtype``, on the
    CPU: no read-back; a callable that cannot take a CPU label, or answers on another device,
    and a graph that ``torch.compile`` traces, are left unchecked). Else ``ValueError`` names
    ``gain``.
    """
    gain = options.gain
    if _options.indexed(gain):
        zero: Any = gain[0]
    elif isinstance(gain, str) or not options.validate_args or torch.compiler.is_compiling():
        return
    else:
        zero = _cpu_answer(gain, torch.zeros(1, dtype=_options.compute_dtype(dtype)))
        if zero is _UNANSWERED:
            return
        zero = float(shaped_gains(zero, (1,)))
    if zero != 0:
        raise ValueError(
            "Expected `gain` to give label 0 a gain of 0 with a sparse or catalog target (its "
            f"absent items are label 0 and are not scored), but `gain`(0) is {float(zero)!r}; "
            "score a dense target to count label 0's gain."
        )


def check_catalog_target(
    target: tuple[Tensor, Tensor, Tensor | None],
    finite: Tensor | None,
    both: Tensor | None,
    n_items: int | None,
    gain: Any,
) -> None:
    """The value checks of a catalog target ``(ids, grades, excluded)``: one resolve.

    ``finite`` marks the grades whose declared ``gain`` is finite (``None``: a callable gain),
    ``both`` the relevant entries (grade other than 0) that are excluded (``None``: nothing
    excluded), padding or not; ids are in ``[0, n_items)`` (``None``: any id).
    """
    ids, grades, excluded = target
    valid, limit = ids.ge(0), _INT64_MAX if n_items is None else n_items
    checks = item_id_checks(ids.sort(dim=-1).values, limit)
    negative = (
        "Expected non-negative relevance grades without NaN, but got a negative or NaN grade."
    )
    checks.append(Check(~(valid & (grades.isnan() | grades.lt(0))).any(), None, negative))
    if finite is not None:
        named_as, _, advice = _options.limit_words(gain, None, False)
        overflow = (
            f"Expected grades with a finite gain (`gain`{named_as}), but a grade has none; "
            f"{advice} the grades."
        )
        checks.append(Check(~(valid & ~finite).any(), None, overflow))
    if excluded is not None:
        checks += item_id_checks(excluded, limit, None if both is None else both & valid)
    resolve_checks(checks)


def check_catalog(
    queries: Any, items: Any, score_fn: Any, relevant: Any, exclude: Any, sharded: bool
) -> None:
    """``queries`` ``[B, d]`` and ``items`` ``[N, d]`` embeddings of one dtype and device.

    Scored by a product where ``score_fn`` is ``None``: then of one width, on one device.
    ``relevant`` and ``exclude`` (`check_items`) lie on the device of ``queries``, with its
    ``N`` columns unless the catalog is ``sharded`` (then of any width).
    """
    for name, value in (("queries", queries), ("items", items)):
        if not isinstance(value, Tensor):
            raise TypeError(f"Expected `{name}` to be a tensor, but got {type(value).__name__}.")
    if queries.dim() != 2 or items.dim() != 2:
        raise ValueError(
            "Expected `queries` [B, d] and `items` [N, d], but got shapes "
            f"{tuple(queries.shape)} and {tuple(items.shape)}."
        )
    if score_fn is None and queries.shape[-1] != items.shape[-1]:
        raise ValueError(
            "Expected `queries` and `items` of the same width d, but got "
            f"{queries.shape[-1]} and {items.shape[-1]}."
        )
    if score_fn is None and queries.dtype != items.dtype:
        raise TypeError(
            "Expected `queries` and `items` of the same dtype, but got "
            f"{queries.dtype} and {items.dtype} (convert one, e.g. `items.to(queries.dtype)`)."
        )
    if score_fn is None:  # a `score_fn` may take its chunks from another device
        check_same_device("items", items, queries, "queries")
    n_items = None if sharded else items.shape[0]
    check_items(relevant, "relevant", queries, n_items, "queries")
    if exclude is not None:
        check_items(exclude, "exclude", queries, n_items, "queries")


def check_streaming(
    n_items: int,
    options: ListOptions,
    chunk_size: Any,
    memory_budget: Any,
    item_offset: Any,
    process_group: Any,
) -> None:
    """How a catalog of ``n_items`` (this rank's shard) streams: its sizes, offset and group."""
    check_positive_int("item_offset", item_offset, allow_zero=True)
    if item_offset and process_group is None:
        raise ValueError(
            f"Expected `item_offset` 0 without `process_group` (one process holds the whole "
            f"catalog: `items[j]` is item j, and the ids of `relevant` and `exclude` are in "
            f"[0, {n_items})), but got {item_offset}; with item shards on several ranks, "
            "pass `process_group` (ids are then global, the shards tiling [0, N))."
        )
    if item_offset + n_items >= CATALOG_PLACEHOLDER:
        raise ValueError(
            f"Expected a catalog of fewer than {CATALOG_PLACEHOLDER} items, but `item_offset` "
            f"{item_offset} + {n_items} items reach past it."
        )
    for name, size in (("chunk_size", chunk_size), ("memory_budget", memory_budget)):
        if size is not None:
            check_positive_int(name, size)
    if process_group is not None and options.cutoffs.ks is None:
        raise ValueError("Expected an int `k` (or a sequence) with `process_group`, but got None.")


def check_block(block: Tensor, expected: tuple[int, int]) -> None:
    """A block of scores that ``score_fn`` returned has the ``expected`` shape."""
    if tuple(block.shape) != expected:
        raise ValueError(
            f"Expected `score_fn` to return scores of shape {expected}, "
            f"but got {tuple(block.shape)}."
        )


def check_shards(spans: list[tuple[int, int]]) -> None:
    """The ranks' ``(offset, size)`` item shards, in ascending order, tile ``[0, N)``."""
    end = 0
    for offset, size in spans:
        if size and offset != end:
            raise ValueError(
                "Expected the ranks' item shards (`item_offset`, len(`items`)) to tile the "
                f"catalog without gap or overlap, but got (offset, size) pairs {spans}."
            )
        end += size


def check_sparse(preds: Any, target: Tensor, exclude: Any, mask: Any, options: ListOptions) -> None:
    """Dense ``[B, N]`` ``preds`` against a sparse ``target``, with ``mask`` and ``exclude``."""
    if options.ignore_index is not None:
        raise ValueError(
            f"Expected no `ignore_index` with a sparse target (absent entries are 0), "
            f"but got {options.ignore_index!r}; mark items that take no rank with `exclude`."
        )
    if not isinstance(preds, Tensor) or not preds.is_floating_point():
        raise TypeError(
            f"Expected floating `preds`, but got {getattr(preds, 'dtype', type(preds))}."
        )
    if preds.dim() != 2 or tuple(target.shape) != tuple(preds.shape):
        raise ValueError(
            "Expected 2-D `preds` [B, N] and a sparse `target` of the same shape, but got "
            f"{tuple(preds.shape)} and {tuple(target.shape)}."
        )
    if target.layout not in (torch.sparse_coo, torch.sparse_csr):
        raise ValueError(
            f"Expected a sparse `target` in the COO or CSR layout, but got {target.layout}."
        )
    check_same_device("target", target, preds)
    check_mask(mask, preds)
    if exclude is not None:
        check_items(exclude, "exclude", preds, preds.shape[1])


def check_exclusions(preds: Any, target: Any, mask: Any, exclude: Any) -> None:
    """``exclude`` (`check_items`) with dense 2-D ``preds`` and ``target`` (and their ``mask``)."""
    check_preds_target(preds, target)
    check_mask(mask, preds)
    if preds.ndim != 2:
        raise ValueError(
            f"Expected 2-D `preds` [B, N] with `exclude`, but got {tuple(preds.shape)}."
        )
    check_items(exclude, "exclude", preds, preds.shape[1])


# --- The paired tests' samples -------------------------------------------------------------------


def _split_sample(name: str, sample: object) -> tuple[Any, Tensor | None]:
    """``(values, ids)`` of a sample given as values alone or as a ``(values, ids)`` pair."""
    if isinstance(sample, tuple):
        if len(sample) != 2:
            raise ValueError(
                f"Expected `{name}` as values or a `(values, ids)` pair, but got a tuple of "
                f"{len(sample)} items."
            )
        values, ids = sample
        single = " (the result of a single query: a paired test needs 2 or more)"
        check_query_ids(f"{name}[1]", ids, scalar_hint=single)
        return values, ids
    return sample, None


def check_paired_samples(
    a: object, b: object, unmatched_ids: Any, allowed: Sequence[str]
) -> tuple[Any, Tensor | None, Any, Tensor | None]:
    """Two samples of a paired test: ``(a_values, a_ids, b_values, b_ids)``, each checked.

    Both with ids or both without; both dicts of one set of cut-offs or both tensors; each
    column a 1-D floating tensor (`check_paired_values`), of one shape where there are no ids.
    ``unmatched_ids`` is one of ``allowed``.
    """
    check_option("unmatched_ids", unmatched_ids, allowed, callable_ok=False)
    a_values, a_ids = _split_sample("a", a)
    b_values, b_ids = _split_sample("b", b)
    if (a_ids is None) != (b_ids is None):
        raise TypeError(
            "Expected `a` and `b` both as `(values, ids)` pairs or both as values in the same "
            f"query order, but got ids with {'`a`' if a_ids is not None else '`b`'} only."
        )
    if isinstance(a_values, Mapping) != isinstance(b_values, Mapping):
        raise TypeError(
            "Expected `a` and `b` both to be dicts of values per cut-off or both tensors, but got "
            f"{type(a_values).__name__} and {type(b_values).__name__}."
        )
    if isinstance(a_values, Mapping) and set(a_values) != set(b_values):
        raise ValueError(
            "Expected `a` and `b` to have the same cut-offs, but got "
            f"{sorted(a_values)} and {sorted(b_values)}."
        )
    names = list(a_values) if isinstance(a_values, Mapping) else [None]
    for name in names:
        first, second = (a_values, b_values) if name is None else (a_values[name], b_values[name])
        check_paired_values("a", first, a_ids)
        check_paired_values("b", second, b_ids, like=first)
        if a_ids is None and first.shape != second.shape:
            raise ValueError(
                "Expected `a` and `b` to be 1-D tensors of one shape (a value per query, the "
                f"same queries in the same order), but got {tuple(first.shape)} and "
                f"{tuple(second.shape)}."
            )
    return a_values, a_ids, b_values, b_ids


def check_paired_ids(
    a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], unmatched_ids: str
) -> None:
    """Each sample's ``(sorted ids, which the other has)``: distinct ids, the same set of them.

    Unless ``unmatched_ids="intersect"``, every id of one sample is in the other's.
    """
    for name, (ids, _) in (("a", a), ("b", b)):
        if ids.numel() > 1 and bool((ids[1:] == ids[:-1]).any()):
            repeated = ids[1:][ids[1:] == ids[:-1]][:5].tolist()
            raise ValueError(
                f"Expected the ids of `{name}` to be distinct (one value per query), but got "
                f"repeated ids {repeated}."
            )
    (a_sorted, a_common), (b_sorted, b_common) = a, b
    if unmatched_ids == "raise" and not bool(a_common.all() & b_common.all()):
        only_a, only_b = a_sorted[~a_common], b_sorted[~b_common]
        raise ValueError(
            "Expected `a` and `b` to have the same query ids, but "
            f"{only_a.numel()} are only in `a` (e.g. {only_a[:5].tolist()}) and "
            f"{only_b.numel()} only in `b` (e.g. {only_b[:5].tolist()}); pass "
            "`unmatched_ids`='intersect' to test on the queries both have."
        )
