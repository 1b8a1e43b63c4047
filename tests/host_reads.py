"""Count the values a piece of code reads back from its tensors to the host.

At the dispatcher (a ``TorchDispatchMode``): ``.item()`` / ``bool(t)`` / ``float(t)``
(``aten._local_scalar_dense``, ``aten.is_nonzero``), ``torch.equal``, and the ops whose output
shape depends on values (``nonzero``, ``masked_select``, ``unique``, boolean indexing). Above
it, ``Tensor.tolist()`` and ``Tensor.numpy()``, which read a CPU tensor's memory directly and
never reach the dispatcher.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

READ_BACK_OPS = {
    aten._local_scalar_dense.default,
    aten.is_nonzero.default,
    aten.equal.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
}


def _is_boolean_indexing(func: Any, args: tuple[Any, ...]) -> bool:
    if func is not aten.index.Tensor:
        return False
    return any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in args[1])


class _Counter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if func in READ_BACK_OPS or _is_boolean_indexing(func, args):
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def count_host_reads() -> Iterator[list[str]]:
    """Yield a list that fills with one entry per read-back made inside the block."""
    counter = _Counter()
    tolist, numpy = torch.Tensor.tolist, torch.Tensor.numpy

    def counted_tolist(self: torch.Tensor) -> Any:
        counter.reads.append("Tensor.tolist")
        return tolist(self)

    def counted_numpy(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        counter.reads.append("Tensor.numpy")
        return numpy(self, *args, **kwargs)

    with (
        mock.patch.object(torch.Tensor, "tolist", counted_tolist),
        mock.patch.object(torch.Tensor, "numpy", counted_numpy),
        counter,
    ):
        yield counter.reads
