"""The one cache of constant tables (discounts per cut-off, gain steps, pair weights).

A metric or a training loop asks for the same small tables at every call, so they are built
once and kept. What is kept is bounded per device: at most `TABLES_PER_DEVICE` tables holding
at most `ELEMENTS_PER_DEVICE` elements in all (32 MiB of float64), the least recently used
going first; a larger table is built at every call and never kept. So the cache holds a
bounded amount of accelerator memory however many shapes a process meets.

Tables are built outside inference mode and without autograd, so that one kept from a metric's
update can serve a loss's backward later. Kept tables are read-only: never modify one in place.
A table built from a callable argument (a user's discount, possibly unhashable or changing
between calls) is built every time, and so is one asked for under ``torch.compile`` (a graph
keeps its own constants).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import ParamSpec, TypeVar

import torch
from torch import Tensor

TABLES_PER_DEVICE = 64
ELEMENTS_PER_DEVICE = 1 << 22

_Params = ParamSpec("_Params")
_Table = TypeVar("_Table", Tensor, tuple[Tensor | None, ...])

# The kept tables of each device, least recently used first.
_kept: dict[torch.device, OrderedDict[Hashable, Tensor | tuple[Tensor | None, ...]]] = {}


def _elements(table: Tensor | tuple[Tensor | None, ...]) -> int:
    """The number of elements of a table (of all its tensors, for a tuple)."""
    parts = (table,) if isinstance(table, Tensor) else table
    return sum(part.numel() for part in parts if part is not None)


def kept(build: Callable[_Params, _Table]) -> Callable[_Params, _Table]:
    """Decorate a builder of constant tables whose arguments include its ``torch.device``.

    The builder runs outside inference mode and without autograd (see the module); its
    positional arguments are the key; the device among them picks the kept
    tables that the result counts against (see the module's bounds). A call with keyword
    arguments, or with no device among its positional ones, is not kept.
    """
    built = torch.no_grad()(torch.inference_mode(False)(build))

    @functools.wraps(build)
    def table(*args: _Params.args, **kwargs: _Params.kwargs) -> _Table:
        device = None
        for arg in args:  # a loop, not a generator: this runs at every call of a metric or loss
            if callable(arg):  # built every time
                return built(*args, **kwargs)
            if isinstance(arg, torch.device):
                device = arg
        if device is None or kwargs or torch.compiler.is_compiling():
            return built(*args, **kwargs)
        tables = _kept.setdefault(device, OrderedDict())
        key = (build, args)
        found = tables.get(key)
        if found is not None:
            tables.move_to_end(key)
            return found  # type: ignore[return-value]
        result = built(*args, **kwargs)
        if _elements(result) <= ELEMENTS_PER_DEVICE:  # then drop the least recently used
            tables[key] = result
            elements = sum(map(_elements, tables.values()))  # counted once, not per table dropped
            while len(tables) > TABLES_PER_DEVICE or elements > ELEMENTS_PER_DEVICE:
                elements -= _elements(tables.popitem(last=False)[1])
        return result

    return table
