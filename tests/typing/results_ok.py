"""A user's code that must pass ``mypy --strict``: ``compute()`` is typed by construction."""

import torch
from torch import Tensor
from typing_extensions import assert_type

import torch_ndcg as tn
from torch_ndcg import NDCG, RetrievalNDCG, ndcg
from torch_ndcg.functional import retrieval_ndcg

many = NDCG(k=[1, 5])
assert_type(many.compute(), dict[str, Tensor])
first: Tensor = many.compute()["ndcg@1"]

one = NDCG(k=5)
assert_type(one.compute(), Tensor)
value: float = one.compute().item()
assert_type(NDCG().compute(), Tensor)

assert_type(RetrievalNDCG(k=10).compute(), Tensor)
assert_type(RetrievalNDCG(k=(1, 10), aggregation="max").compute(), dict[str, Tensor])
assert_type(RetrievalNDCG(k=10, aggregation="none").compute(), tuple[Tensor, Tensor])
per_query, ids = RetrievalNDCG(k=[1, 3], aggregation="none").compute()
assert_type(per_query, dict[str, Tensor])

assert_type(ndcg(torch.rand(2, 3), torch.ones(2, 3), k=3), Tensor)

assert_type(NDCG(k=5, confidence=0.95).compute(), dict[str, Tensor])
low: Tensor = NDCG(confidence=0.9).compute()["ndcg_low"]
assert_type(RetrievalNDCG(k=5, confidence=0.95).compute(), dict[str, Tensor])
assert_type(RetrievalNDCG(k=5, aggregation="median", confidence=0.9).compute(), dict[str, Tensor])

# Every keyword, taken as `**options: Unpack[...]`, is seen with its type.
p, t = torch.rand(2, 3), torch.ones(2, 3)
assert_type(ndcg(p, t, mask=t > 0, exclude=None, k=[1, 3], gain="linear", ties="first"), Tensor)
assert_type(tn.dcg(p, t, mask=None, k=2, discount=lambda r: 1 / r, ignore_index=-1), Tensor)
assert_type(retrieval_ndcg(p, t, t.long(), k=2, empty_target_action="skip"), tuple[Tensor, Tensor])
assert_type(tn.catalog_ndcg(p, p, t.long(), k=2, chunk_size=64, gain="linear"), Tensor)
assert_type(ndcg(p, t, k=2, gain=[0, 1, 3, 7]), Tensor)
assert_type(tn.lambdarank_loss(p, t, gain=(0.0, 1.0, 3.0)), Tensor)
NDCG(k=3, ties="first", sync_on_compute=False).update_catalog(p, p, t.long(), item_offset=0)
RetrievalNDCG(k=3, bootstrap_resamples=10, bootstrap_seed=1, validate_args=False)
assert_type(tn.lambdarank_loss(p, t, mask=None, weight=p, sigma=2.0, weighting="ndcg2"), Tensor)
assert_type(tn.approx_ndcg_loss(p, t, temperature=0.1, reduction="sum"), Tensor)
assert_type(tn.neural_ndcg_loss(p, t, max_iter=10, tol=1e-4, k=2), Tensor)
tn.LambdaRankLoss(k=5, mu=2.0)
tn.ApproxNDCGLoss(temperature=0.5, ignore_index=-1)
tn.NeuralNDCGLoss(max_iter=5)
tn.UnbiasedLambdaRankLoss(num_positions=5, bias_norm=1.0, momentum=0.5, match_exposure=False)
