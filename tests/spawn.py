"""Run a test worker in several spawned processes and collect what each rank saved."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessExitedException

SPAWN_TIMEOUT_S = 120
# What a rendezvous leaves in the environment of the process that launched it (Lightning's
# ddp_spawn sets these in the test process itself).
RENDEZVOUS_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
)
T = TypeVar("T")


def cpu_trainer(devices: int, **options: Any) -> Any:
    """A quiet Lightning ``Trainer`` on the CPU: ``ddp_spawn`` over ``devices`` (gloo) above one.

    No logger, checkpoints, progress bar or model summary; ``options`` go to the ``Trainer``.
    """
    lightning = pytest.importorskip("lightning")
    return lightning.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp_spawn" if devices > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )


def retry_exit_abort(run: Callable[[], T]) -> T:
    """``run()`` (a whole ``ddp_spawn`` Trainer run), once more if a worker aborted at exit.

    A worker of Lightning's ``ddp_spawn`` on gloo occasionally dies of SIGABRT after its work is
    done (seen about once in ten runs of the suite on a 2-core machine: the validation table
    printed, then "process 1 terminated with signal SIGABRT"), in torch's teardown, not in the
    code under test. Such a run is repeated once from the start; any other failure, or a second
    abort, fails the test.
    """
    try:
        return run()
    except ProcessExitedException as error:
        if error.signal_name != "SIGABRT":
            raise
    # Lightning left the aborted run's port in the environment: the retry picks a free one.
    for name in RENDEZVOUS_VARIABLES:
        os.environ.pop(name, None)
    return run()


def free_port() -> int:
    """A TCP port free on this machine, for the processes' rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(worker: Callable[..., None], world: int, out_dir: Path, *args: Any) -> list[Any]:
    """``worker(rank, port, out_dir, *args)`` in ``world`` processes; each saves ``rank{r}.pt``.

    Fails the test (never hangs) when the workers take longer than :data:`SPAWN_TIMEOUT_S`.
    """
    context = mp.start_processes(
        worker,
        args=(free_port(), str(out_dir), *args),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"DDP workers did not finish within {SPAWN_TIMEOUT_S} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [torch.load(out_dir / f"rank{rank}.pt") for rank in range(world)]
