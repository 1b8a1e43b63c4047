"""Load the small real ranking data set in ``examples/data/`` as padded lists.

LightGBM's ``examples/lambdarank`` data (MIT licence, see ``examples/data/LICENSE``): SVMlight
rows ``label feature:value ...`` with 300 features and graded labels 0-4; the ``.query`` files
give how many consecutive rows each query has. Files with ``qid:`` on each row (LETOR, MSLR,
Yahoo, Istella) are read by ``load_svmlight_file(path, query_id=True)`` instead, and
``torch_ndcg.pad_by_query`` lays the flat rows out as padded lists either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_svmlight_file

from torch_ndcg import pad_by_query

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
        (features, labels), mask, _, _ = pad_by_query(
            torch.from_numpy(self.query_ids()),
            torch.from_numpy(self.features),
            torch.from_numpy(self.labels.astype(np.float32)),
        )
        return features, labels, mask

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


def load_split(name: str) -> RankingSplit:
    """``name`` is ``"train"`` or ``"test"``."""
    features, labels = load_svmlight_file(str(DATA_DIR / f"rank.{name}"), n_features=NUM_FEATURES)
    sizes = np.loadtxt(DATA_DIR / f"rank.{name}.query", dtype=np.int64)
    return RankingSplit(np.asarray(features.todense(), dtype=np.float32), labels, sizes)
