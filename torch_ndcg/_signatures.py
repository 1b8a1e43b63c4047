"""Run-time signatures that spell out ``**options: Unpack[...Keywords]``.

The public functions, metrics and losses take their options as ``**options:
Unpack[...Keywords]`` (each keyword declared once, in a TypedDict of `torch_ndcg._options`,
with its default in ``DEFAULTS``). A type checker reads the TypedDict; ``help()``,
``inspect.signature``, IPython's ``?`` and argument parsers built on signatures (for example
LightningCLI's) read ``__signature__``, which this module sets to the spelled-out form,
``f(preds, target, *, k=None, gain="exponential", ...)`` for ``f(preds, target, **options)``.

Keywords without a default in ``DEFAULTS`` (torchmetrics' own, passed on to ``Metric``) stay
behind ``**options``. Nothing is wrapped: calls cost what they did.

Example:
    >>> import inspect
    >>> from torch_ndcg import ndcg
    >>> parameters = inspect.signature(ndcg).parameters
    >>> list(parameters)[:4]
    ['preds', 'target', 'mask', 'exclude']
    >>> parameters["gain"].default, parameters["gain"].kind.name
    ('exponential', 'KEYWORD_ONLY')
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any

import typing_extensions

from torch_ndcg._metric_base import MetricKeywords
from torch_ndcg._options import DEFAULTS

__all__ = ["spell_out_keywords"]

_UNPACK = {typing_extensions.Unpack, getattr(typing, "Unpack", typing_extensions.Unpack)}
# torchmetrics' keywords (`MetricKeywords`) are passed on to `Metric`: not ours to show.
_METRIC_KEYWORDS = MetricKeywords.__required_keys__ | MetricKeywords.__optional_keys__


def _spelled(function: Callable[..., Any]) -> inspect.Signature | None:
    """``function``'s signature with its ``Unpack``-ed keywords as keyword-only parameters."""
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if not parameters or parameters[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        return None
    try:
        hint = typing.get_type_hints(function, include_extras=True).get(parameters[-1].name)
        if typing.get_origin(hint) not in _UNPACK:
            return None
        (keywords,) = typing.get_args(hint)
        annotations = typing.get_type_hints(keywords, include_extras=True)
    except (NameError, TypeError):  # hints this Python cannot evaluate: keep `**options`
        return None
    # A metric's keywords include all of torchmetrics'; elsewhere every keyword is ours.
    theirs = _METRIC_KEYWORDS if annotations.keys() >= _METRIC_KEYWORDS else frozenset()
    spelled = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[name]
        )
        for name, default in DEFAULTS.items()
        if name in annotations and name not in theirs and name not in signature.parameters
    ]
    rest = [name for name in annotations if name not in DEFAULTS or name in theirs]
    tail = [parameters[-1]] if rest else []
    return signature.replace(parameters=[*parameters[:-1], *spelled, *tail])


def spell_out_keywords(objects: Iterable[object]) -> None:
    """Set ``__signature__`` on each function, and each class's ``__init__`` and methods."""
    for obj in objects:
        functions = (
            [member for member in vars(obj).values() if inspect.isfunction(member)]
            if isinstance(obj, type)
            else [obj]
        )
        for function in functions:
            if inspect.isfunction(function) and (signature := _spelled(function)) is not None:
                function.__signature__ = signature  # type: ignore[attr-defined]
