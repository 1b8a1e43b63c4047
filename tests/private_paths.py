"""Every reach of the tests into the package's internals, for the budget tests alone.

Behaviour tests use only public names (``tests/test_suite_rules.py`` holds it); what forces a
private path, patches a private name or counts the work of one lives here or in a test marked
``budget``, so that a re-partition of the package re-baselines these knowingly
(``tests/README.md``). The package's private modules are imported inside the functions, never at
import time: ``pytest -m "not budget"`` imports no private name.
"""

from __future__ import annotations

import pytest


def take_accelerator_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the package behave on the CPU as on an accelerator: it reads nothing back."""
    from torch_ndcg import _host

    monkeypatch.setattr(_host, "may_read_back", lambda device: False)


@pytest.fixture
def accelerator_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU taking an accelerator's paths (no value read back) for the test that asks."""
    take_accelerator_paths(monkeypatch)


@pytest.fixture(params=["dense", pytest.param("blocks", marks=pytest.mark.budget)])
def pair_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both paths of the pair losses: a small batch's whole ``[N, L, L]`` tensors under
    autograd, or (as for long lists, forced here: a budget item) the blockwise Functions with a
    few elements per block: many blocks, uneven last blocks."""
    if request.param == "blocks":
        force_blockwise_pairs(monkeypatch)


@pytest.fixture(params=["one table", pytest.param("per block", marks=pytest.mark.budget)])
def pair_table(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The position weights of LambdaRank as one table, or (as for long lists, forced here: a
    budget item) built block by block."""
    if request.param == "per block":
        from torch_ndcg import _pairwise, _tables

        monkeypatch.setattr(_pairwise, "PAIR_TABLE_ELEMENTS", 0)
        monkeypatch.setattr(_tables, "_kept", {})  # no table kept from a call that had one
    return str(request.param)


def force_blockwise_pairs(monkeypatch: pytest.MonkeyPatch, block_elements: int = 7) -> None:
    """The pair losses' blockwise Functions for every batch, with small blocks."""
    from torch_ndcg import _pairwise

    monkeypatch.setattr(_pairwise, "DENSE_PAIR_ELEMENTS", 0)
    monkeypatch.setattr(_pairwise, "BLOCK_ELEMENTS", block_elements)
