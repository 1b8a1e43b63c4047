"""torch_ndcg: nDCG for PyTorch — functional metric, torchmetrics metrics and ranking losses."""

from torch_ndcg import functional
from torch_ndcg.functional import *  # noqa: F403 (its `__all__`, re-exported below)
from torch_ndcg.losses import (
    ApproxNDCGLoss,
    LambdaRankLoss,
    ListMLELoss,
    NeuralNDCGLoss,
    PLRankLoss,
    RankNetLoss,
    SoftmaxLoss,
    UnbiasedLambdaRankLoss,
    XENDCGLoss,
)
from torch_ndcg.metrics import NDCG, RetrievalNDCG

__version__ = "0.1.0.dev0"

# The functional core's names are listed once, in `torch_ndcg.functional.__all__`.
__all__ = [
    "NDCG",
    "ApproxNDCGLoss",
    "LambdaRankLoss",
    "ListMLELoss",
    "NeuralNDCGLoss",
    "PLRankLoss",
    "RankNetLoss",
    "RetrievalNDCG",
    "SoftmaxLoss",
    "UnbiasedLambdaRankLoss",
    "XENDCGLoss",
    "__version__",
]
__all__ += functional.__all__
