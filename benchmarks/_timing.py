"""Shared helpers of the benchmark scripts: best-of timing and the device to run on."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device | None) -> None:
    """Wait for the work queued on ``device`` (CUDA runs asynchronously; the CPU does not)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def best_ms(
    fn: Callable[[], object],
    *,
    repeats: int = 7,
    warmup: int = 1,
    device: torch.device | None = None,
) -> float:
    """Best wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs, in milliseconds.

    On CUDA each run is timed from an idle device to the end of its queued work.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def describe(device: torch.device) -> str:
    """The device in words: the GPU's name, or the CPU and its threads."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}"
    return f"CPU, {torch.get_num_threads()} threads"
