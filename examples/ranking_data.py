"""Load the small real ranking data set in ``examples/data/`` as padded lists.

LightGBM's ``examples/lambdarank`` data (MIT licence, see ``examples/data/LICENSE``): SVMlight
rows ``label feature:value ...`` with 300 features and graded labels 0-4; the ``.query`` files
give how many consecutive rows each query has.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_svmlight_file

DATA_DIR = Path(__file__).resolve().parent / "data"
NUM_FEATURES = 300


@dataclass(frozen=True)
class RankingSplit:
    """One split: flat rows (as LightGBM takes them) and the query sizes."""

    features: np.ndarray  # [rows, 300] float32
    labels: np.ndarray  # [rows] float64
    query_sizes: np.ndarray  # [queries] int64, sums to rows

    def padded(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Features ``[Q, L, 300]``, labels ``[Q, L]`` and mask ``[Q, L]`` (True = real row)."""
        return pad_by_query(torch.from_numpy(self.features), self.labels, self.query_sizes)

    def padded_lists(self) -> PaddedLists:
        """The split laid out as padded lists, keeping the flat rows alongside."""
        features, labels, mask = self.padded()
        return PaddedLists(features, labels, mask, self)

    def query_ids(self) -> np.ndarray:
        """Query id of every row, 0..Q-1."""
        return np.repeat(np.arange(len(self.query_sizes)), self.query_sizes)


@dataclass(frozen=True)
class PaddedLists:
    """Padded lists ``[Q, L, 300]`` features, ``[Q, L]`` labels and mask, and the flat split."""

    features: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor
    flat: RankingSplit


def pad_by_query(
    rows: torch.Tensor, labels: np.ndarray, query_sizes: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lay flat rows out as padded lists ``[Q, L, ...]``; ``L`` is the longest query."""
    sizes = torch.from_numpy(np.asarray(query_sizes, dtype=np.int64))
    longest = int(sizes.max())
    mask = torch.arange(longest) < sizes[:, None]
    padded_rows = rows.new_zeros((len(sizes), longest, *rows.shape[1:]))
    padded_rows[mask] = rows
    padded_labels = torch.zeros(len(sizes), longest, dtype=torch.float32)
    padded_labels[mask] = torch.from_numpy(np.asarray(labels, dtype=np.float32))
    return padded_rows, padded_labels, mask


def load_split(name: str) -> RankingSplit:
    """``name`` is ``"train"`` or ``"test"``."""
    features, labels = load_svmlight_file(str(DATA_DIR / f"rank.{name}"), n_features=NUM_FEATURES)
    sizes = np.loadtxt(DATA_DIR / f"rank.{name}.query", dtype=np.int64)
    return RankingSplit(np.asarray(features.todense(), dtype=np.float32), labels, sizes)
