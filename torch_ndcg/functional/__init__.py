"""The functional core: nDCG of lists and of query rows, and the ranking losses.

Every public function of the package that takes tensors lives here; the metric classes and the
loss modules are thin layers over it.
"""

from torch_ndcg.functional._catalog import catalog_ndcg
from torch_ndcg.functional._clicks import examination_probability, simulate_clicks
from torch_ndcg.functional._listmle_losses import listmle_loss
from torch_ndcg.functional._ndcg import dcg, ndcg, retrieval_ndcg
from torch_ndcg.functional._padding import PaddedQueries, pad_by_query, unpad_by_query
from torch_ndcg.functional._pairwise_losses import lambdarank_loss
from torch_ndcg.functional._pl_rank import pl_rank_loss, sample_rankings
from torch_ndcg.functional._ranknet_loss import ranknet_loss
from torch_ndcg.functional._significance import (
    PairedTestResult,
    paired_randomization_test,
    paired_t_test,
)
from torch_ndcg.functional._smooth_losses import approx_ndcg_loss, neural_ndcg_loss
from torch_ndcg.functional._softmax_losses import softmax_loss, xe_ndcg_loss
from torch_ndcg.functional._trec import TrecRows, from_trec

__all__ = [
    "PaddedQueries",
    "PairedTestResult",
    "TrecRows",
    "approx_ndcg_loss",
    "catalog_ndcg",
    "dcg",
    "examination_probability",
    "from_trec",
    "lambdarank_loss",
    "listmle_loss",
    "ndcg",
    "neural_ndcg_loss",
    "pad_by_query",
    "paired_randomization_test",
    "paired_t_test",
    "pl_rank_loss",
    "ranknet_loss",
    "retrieval_ndcg",
    "sample_rankings",
    "simulate_clicks",
    "softmax_loss",
    "unpad_by_query",
    "xe_ndcg_loss",
]
