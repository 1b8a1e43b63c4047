r"""The gains, and what each kind declares: the one place that tells the kinds apart.

A checked ``gain`` is a name, a table or a callable; per label $y$, and for a largest allowed
gain $G$ (the overflow limit of `torch_ndcg._validation`):

| kind | gain | monotone in $y$ | largest label |
|---|---|---|---|
| ``"exponential"`` | $2^y - 1$ | yes | $\log_2(G + 1)$ |
| ``"linear"`` | $y$ | yes | $G$ |
| a table $t$ | $t_y$, whole $0 \le y < \lvert t \rvert$ | if non-decreasing | before a $t_y > G$ |
| a callable $f$ | $f(y)$ | not known | none |

Names and tables are *declared*: never negative (so nDCG is at most 1), with a largest label. A
table is LightGBM's and XGBoost's ``label_gain``, checked (`torch_ndcg._validation.check_gain`)
into a tuple of finite non-negative floats; on a device it is a tensor built once per table,
dtype and device (`torch_ndcg._tables`). A monotone gain lets the ideal DCG come from the label
order (or the label counts). The rest of the package asks the questions below and branches on
nothing else: a new named gain is a row of `_NAMED` and its literal in
`torch_ndcg._options.GainName`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple, TypeGuard

import torch
from torch import Tensor

from torch_ndcg import _tables
from torch_ndcg._options import Gain, GainName, as_dtype


class _Named(NamedTuple):
    """What a named gain declares: its formula, its inverse, and how its limit is worded."""

    formula: Callable[[Tensor], Tensor]
    inverse: Callable[[float], float]  # the largest label whose gain is at most a given gain
    shown: Callable[[float], str]  # the limit as the message gives it (never above it)
    symbolic: str  # the limit where the list length is a traced symbol
    advice: str


_NAMED: dict[str, _Named] = {
    "exponential": _Named(
        lambda y: torch.exp2(y) - 1,
        lambda largest: math.log2(largest + 1),  # 2^y - 1 <= largest
        lambda limit: f"{math.floor(limit * 100) / 100:.2f}",
        "log2(max(float64) / L + 1)",
        "use `gain`='linear' or rescale",
    ),
    "linear": _Named(
        lambda y: y, lambda largest: largest, "{:.6g}".format, "max(float64) / L", "rescale"
    ),
}


def elementwise(gain: Any) -> bool:
    """A name or a callable, taken as given; any other ``gain`` is checked as a table."""
    return isinstance(gain, str) or callable(gain)


def named(gain: Gain) -> TypeGuard[GainName]:
    """A built-in name: the small paths take only these (their checks are the label range's)."""
    return isinstance(gain, str)


def declared(gain: Gain) -> bool:
    """A name or a table: non-negative (nDCG at most 1), with a largest label; not a callable."""
    return not callable(gain)


def indexed(gain: Gain) -> bool:
    """A table: the labels index it, so they must be whole numbers in its range."""
    return isinstance(gain, tuple)


def monotone(gain: Gain) -> bool:
    """Whether the gain never decreases with the label: then the ideal order is the label order."""
    if isinstance(gain, str):
        return True
    return isinstance(gain, tuple) and all(low <= high for low, high in itertools.pairwise(gain))


def largest_label(gain: Gain, largest_gain: Any) -> Any:
    """The largest label whose gain (and every smaller label's) is at most ``largest_gain``.

    ``None`` for a callable (no limit); for a table, the last label before the first entry
    above ``largest_gain`` (its length less one where none is).
    """
    if isinstance(gain, str):
        return _NAMED[gain].inverse(largest_gain)
    if isinstance(gain, tuple):
        return next((label for label, g in enumerate(gain) if g > largest_gain), len(gain)) - 1
    return None


def limit_words(gain: Gain, limit: Any, number: bool) -> tuple[str, str, str]:
    """How a message names the gain, its label limit (a formula unless ``number``), the remedy."""
    if isinstance(gain, tuple):
        what = f" a table of {len(gain)} per-label gains"
        return what, str(limit), "give every label a finite gain in the table or rescale"
    words = _NAMED[str(gain)]
    return f"={gain!r}", words.shown(limit) if number else words.symbolic, words.advice


@_tables.kept
def _table(gain: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """The table as a tensor, NaN past its end (the gain of a label outside it): kept."""
    return torch.tensor((*gain, math.nan), dtype=dtype, device=device)


def gains(target: Tensor, gain: Gain, dtype: torch.dtype) -> Tensor:
    r"""Gain of each label, computed in ``dtype``: $2^y - 1$, $y$, ``gain[y]`` or ``gain(y)``.

    A table gives NaN to a label that is not one of its indices (negative, fractional or past
    its end): the checks reject those labels, and padding's gain is replaced by the callers.

    Args:
        target: relevance labels.
        gain: a checked gain: a name, a tuple of per-label gains or an element-wise callable.
        dtype: the floating dtype the labels are taken in (a callable may answer in another).

    Returns:
        A tensor of the shape of ``target``.
    """
    target = as_dtype(target, dtype)
    if gain == "exponential":  # the default, without a call through `_NAMED`
        return torch.exp2(target) - 1
    if isinstance(gain, str):
        return _NAMED[gain].formula(target)
    if callable(gain):
        return gain(target)
    size = len(gain)
    index = target.long()
    inside = (target == index) & (index >= 0) & (index < size)
    return _table(tuple(gain), dtype, target.device)[torch.where(inside, index, size)]
