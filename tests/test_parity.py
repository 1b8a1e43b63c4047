"""Parity with LightGBM's own reported nDCG on real data."""

from __future__ import annotations

import pytest
import torch
from ranking_data import load_split

from torch_ndcg import ndcg, pad_by_query

lightgbm = pytest.importorskip("lightgbm")


@pytest.mark.filterwarnings("ignore:The argument 'eval_set' is deprecated")
def test_lightgbm_reported_ndcg_is_reproduced(device: torch.device) -> None:
    train, test = load_split("train"), load_split("test")
    ranker = lightgbm.LGBMRanker(n_estimators=20, verbose=-1)
    cutoffs = [1, 3, 5, 10]
    ranker.fit(
        train.features,
        train.labels,
        group=train.query_sizes,
        eval_set=[(test.features, test.labels)],
        eval_group=[test.query_sizes],
        eval_at=cutoffs,
    )
    reported = [ranker.evals_result_["valid_0"][f"ndcg@{k}"][-1] for k in cutoffs]
    scores = torch.from_numpy(ranker.predict(test.features)).double()
    (preds, target), mask, _, _ = pad_by_query(
        torch.from_numpy(test.query_ids()), scores, torch.from_numpy(test.labels)
    )
    # LightGBM's eval: exponential gain, stable tie order, lists with no relevant item score 1.
    ours = ndcg(
        preds.to(device),
        target.to(device),
        k=cutoffs,
        mask=mask.to(device),
        ties="first",
        empty_target_action="pos",
    ).cpu()
    expected = torch.tensor(reported, dtype=torch.float64)
    torch.testing.assert_close(ours.mean(dim=0), expected, rtol=0, atol=1e-12)
