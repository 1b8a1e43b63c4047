"""torch_ndcg: nDCG for PyTorch — functional metric, torchmetrics metrics and ranking losses."""

from torch_ndcg.functional import dcg, ndcg
from torch_ndcg.metrics import NDCG, RetrievalNDCG

__version__ = "0.1.0.dev0"

__all__ = ["NDCG", "RetrievalNDCG", "__version__", "dcg", "ndcg"]
