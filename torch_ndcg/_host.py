"""Host read-backs: where they are allowed, and all of a call's values in one.

On an accelerator every value read back to the host (``.item()``, ``bool(tensor)``,
``.tolist()``, a data-dependent shape) stalls the stream, and under ``torch.compile`` it breaks
the graph. So the package reads values back only on the CPU in eager mode (`may_read_back`),
and there at most once per call: the input checks hand their values over as a
`DeferredCheck`, which the kernel reads together with the values that pick its fast
paths (`read_together`). Elsewhere checks are device-side assertions
(`assert_on_device`) and the kernels take their branch-free paths.

The package's matrix products run in their own dtypes whatever the caller switched on
(`full_precision`: no autocast, no TF32).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


def may_read_back(device: torch.device) -> bool:
    """Whether a value on ``device`` may be read back: on the CPU, outside ``torch.compile``."""
    return device.type == "cpu" and not torch.compiler.is_compiling()


@dataclass(frozen=True)
class DeferredCheck:
    """An input check waiting for its values to reach the host.

    Attributes:
        values: 1-D tensor of the values the check needs (reductions of the input).
        judge: takes those values as floats, raises on bad input, and returns what it learnt.
    """

    values: Tensor
    judge: Callable[[list[float]], Any]

    def resolve(self) -> Any:
        """Read the values back (one read-back) and judge them."""
        return self.judge(read_together([self.values])[0])


def read_together(tensors: Sequence[Tensor | None]) -> list[list[float]]:
    """Each tensor's values as floats, from one read-back of them all ([] for ``None``)."""
    present = [t.reshape(-1).to(torch.float64) for t in tensors if t is not None]
    flat: list[float] = (
        (torch.cat(present) if len(present) > 1 else present[0]).tolist() if present else []
    )
    out: list[list[float]] = []
    start = 0
    for tensor in tensors:  # a loop, not a comprehension: no Python call
        size = 0 if tensor is None else tensor.numel()
        out.append(flat[start : start + size])
        start += size
    return out


# Raise a message where a bool scalar tensor is False, without a read-back:
# ``torch._assert_async``. On CUDA a device-side assertion (the error surfaces at the next
# synchronisation, and the CUDA context cannot be used afterwards, as with torch's own losses on
# bad targets); on the CPU and under ``torch.compile`` a ``RuntimeError``; on ``meta`` tensors
# nothing.
assert_on_device = torch._assert_async


def full_precision(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Autocast and, on CUDA, TF32 switched off: the kernels' products run in their own dtypes.

    Under ``torch.autocast`` a float32 matrix product would run in float16/bfloat16, which
    cannot even count ranks past 256 exactly; with ``torch.set_float32_matmul_precision("high")``
    (common with Lightning) a CUDA float32 product runs in TF32, about 1e-3 relative error,
    which Sinkhorn's tolerance of 1e-6 cannot meet. Every product of the package runs inside
    this. (Under ``torch.compile`` the matmul precision is the caller's: it cannot be switched
    inside a graph.)
    """
    compiling = torch.compiler.is_compiling()  # then autocast is switched off unread
    autocast = device.type in _AUTOCAST_DEVICES and (
        compiling or torch.is_autocast_enabled(device.type)
    )
    if device.type == "cuda" and not compiling:
        precision, set_precision, full = cuda_matmul_precision()
        if autocast or precision != full:
            return _cuda_full_precision(precision, set_precision, full)
    if autocast:
        return torch.autocast(device.type, enabled=False)
    # Eager: nothing to switch (the usual case) costs no context manager, a few microseconds of
    # host time that a GPU step, bound by the host, would otherwise pay for every product.
    return contextlib.nullcontext() if compiling else _NOTHING_TO_SWITCH


# The context of `full_precision` where nothing is switched: one object, entered again and again.
_NOTHING_TO_SWITCH: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def cuda_matmul_precision() -> tuple[str, Callable[[str], None], str]:
    """The CUDA float32 matmul precision as the caller set it: ``(current, set, full)``.

    Through the legacy ``torch.get/set_float32_matmul_precision`` (full: ``"highest"``), or,
    where the caller used the newer ``torch.backends[.cuda.matmul].fp32_precision`` (torch
    refuses to mix the two), through ``torch.backends.cuda.matmul.fp32_precision`` (full:
    ``"ieee"``).
    """
    with contextlib.suppress(RuntimeError):  # the legacy getter raises where the newer API set it
        return torch.get_float32_matmul_precision(), torch.set_float32_matmul_precision, "highest"
    matmul = torch.backends.cuda.matmul
    return str(matmul.fp32_precision), functools.partial(setattr, matmul, "fp32_precision"), "ieee"


@contextlib.contextmanager
def _cuda_full_precision(
    previous: str, set_precision: Callable[[str], None], full: str
) -> Iterator[None]:
    """No CUDA autocast and full float32 matrix products, then ``previous`` again.

    The arguments are those of `cuda_matmul_precision`, read once by the caller.
    """
    set_precision(full)
    try:
        with torch.autocast("cuda", enabled=False):
            yield
    finally:
        set_precision(previous)


# Device types with an autocast, read once: `torch.amp.is_autocast_available` cannot be traced
# by every torch.compile (2.11's fails on it), a set lookup can.
_AUTOCAST_DEVICES = frozenset(
    device
    for device in ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla", "ipu", "maia")
    if torch.amp.is_autocast_available(device)
)
