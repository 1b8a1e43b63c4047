"""torch_ndcg: nDCG for PyTorch — functional metric, torchmetrics metrics and ranking losses."""

from torch_ndcg.functional import dcg, ndcg

__version__ = "0.1.0.dev0"

__all__ = ["__version__", "dcg", "ndcg"]
