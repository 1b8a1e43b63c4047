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


class _DeviceTables:
    """The kept tables of one device, least recently used first, and their element count."""

    def __init__(self) -> None:
        self.tables: OrderedDict[Hashable, Tensor | tuple[Tensor | None, ...]] = OrderedDict()
        self.elements = 0

    def keep(self, key: Hashable, table: Tensor | tuple[Tensor | None, ...], size: int) -> None:
        """Keep ``table``, then drop the least recently used tables until within the bounds."""
        self.tables[key] = table
        self.elements += size
        while len(self.tables) > TABLES_PER_DEVICE or self.elements > ELEMENTS_PER_DEVICE:
            _, dropped = self.tables.popitem(last=False)
            self.elements -= _elements(dropped)


_kept: dict[torch.device, _DeviceTables] = {}


def _elements(table: Tensor | tuple[Tensor | None, ...]) -> int:
    """The number of elements of a table (of all its tensors, for a tuple)."""
    if isinstance(table, Tensor):
        return table.numel()
    return sum(part.numel() for part in table if part is not None)


def clear() -> None:
    """Drop every kept table (of every device)."""
    _kept.clear()


def kept(build: Callable[_Params, _Table]) -> Callable[_Params, _Table]:
    """Decorate a builder of constant tables whose arguments include its ``torch.device``.

    The builder's positional arguments are the key; the device among them picks the kept
    tables that the result counts against (see the module's bounds). A call with keyword
    arguments, or with no device among its positional ones, is not kept.
    """

    def built(*args: _Params.args, **kwargs: _Params.kwargs) -> _Table:
        with torch.inference_mode(False), torch.no_grad():
            return build(*args, **kwargs)

    @functools.wraps(build)
    def table(*args: _Params.args, **kwargs: _Params.kwargs) -> _Table:
        device = None
        for arg in args:  # a loop, not a generator: this runs at every call of a metric or loss
            if callable(arg):
                device = None
                break
            if isinstance(arg, torch.device):
                device = arg
        if device is None or kwargs or torch.compiler.is_compiling():
            return built(*args, **kwargs)
        tables = _kept.get(device)
        if tables is None:
            tables = _kept[device] = _DeviceTables()
        key = (build, args)
        found = tables.tables.get(key)
        if found is not None:
            tables.tables.move_to_end(key)
            return found  # type: ignore[return-value]
        result = built(*args, **kwargs)
        size = _elements(result)
        if size <= ELEMENTS_PER_DEVICE:
            tables.keep(key, result, size)
        return result

    return table
