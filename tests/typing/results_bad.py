"""Mistakes ``mypy --strict`` must report in a user's code (tests/test_typing.py counts them)."""

import torch

import torch_ndcg as tn
from torch_ndcg import NDCG, LambdaRankLoss, ndcg
from torch_ndcg.functional import retrieval_ndcg

p, t, i = torch.rand(2, 3), torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.long)
NDCG(k=5).compute()["ndcg@5"]  # a scalar metric is a Tensor, not a dict
NDCG(k=[1, 5]).compute().item()  # a dict has no .item()
ndcg(torch.rand(2, 3), torch.ones(2, 3), top_k=3)  # torchmetrics' name: ours is `k`
LambdaRankLoss(weighing_scheme="ndcgLoss2PP_scheme")  # allRank's name: ours is `weighting`
# A misspelt keyword, or a value of the wrong type, at every entry point that takes `**options`:
tn.dcg(p, t, ties="firts")
ndcg(p, t, exclude=[1])
retrieval_ndcg(p, t, i, ignore_idx=-1)
tn.catalog_ndcg(p, p, i, k=5, chunksize=64)
NDCG(k=5, ignore_idx=-1)
NDCG(k=5, sync_on_compute=1.5)
tn.RetrievalNDCG(k=5, bootstrap_seeds=1)
NDCG(k=5).update_catalog(p, p, i, item_ofset=3)
tn.lambdarank_loss(p, t, weights=p)
tn.approx_ndcg_loss(p, t, temprature=0.1)
tn.neural_ndcg_loss(p, t, max_iters=10)
tn.ApproxNDCGLoss(temprature=0.1)
tn.NeuralNDCGLoss(tau=0.1)
tn.UnbiasedLambdaRankLoss(num_positions=5, bias_nrm=1.0)
