"""Mistakes ``mypy --strict`` must report in a user's code (tests/test_typing.py counts them)."""

import torch

from torch_ndcg import NDCG, LambdaRankLoss, ndcg

NDCG(k=5).compute()["ndcg@5"]  # a scalar metric is a Tensor, not a dict
NDCG(k=[1, 5]).compute().item()  # a dict has no .item()
ndcg(torch.rand(2, 3), torch.ones(2, 3), top_k=3)  # torchmetrics' name: ours is `k`
LambdaRankLoss(weighing_scheme="ndcgLoss2PP_scheme")  # allRank's name: ours is `weighting`
