"""torch_ndcg: nDCG for PyTorch — functional metric, torchmetrics metrics and ranking losses."""

from torch_ndcg._unbiased import UnbiasedLambdaRankLoss
from torch_ndcg.functional import (
    PairedTestResult,
    approx_ndcg_loss,
    catalog_ndcg,
    dcg,
    examination_probability,
    lambdarank_loss,
    ndcg,
    neural_ndcg_loss,
    paired_randomization_test,
    paired_t_test,
    retrieval_ndcg,
    simulate_clicks,
)
from torch_ndcg.losses import ApproxNDCGLoss, LambdaRankLoss, NeuralNDCGLoss
from torch_ndcg.metrics import NDCG, RetrievalNDCG

__version__ = "0.1.0.dev0"

__all__ = [
    "NDCG",
    "ApproxNDCGLoss",
    "LambdaRankLoss",
    "NeuralNDCGLoss",
    "PairedTestResult",
    "RetrievalNDCG",
    "UnbiasedLambdaRankLoss",
    "__version__",
    "approx_ndcg_loss",
    "catalog_ndcg",
    "dcg",
    "examination_probability",
    "lambdarank_loss",
    "ndcg",
    "neural_ndcg_loss",
    "paired_randomization_test",
    "paired_t_test",
    "retrieval_ndcg",
    "simulate_clicks",
]
