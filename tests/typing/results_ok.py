"""A user's code that must pass ``mypy --strict``: ``compute()`` is typed by construction."""

import torch
from torch import Tensor
from typing_extensions import assert_type

from torch_ndcg import NDCG, RetrievalNDCG, ndcg

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
