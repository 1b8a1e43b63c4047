r"""The small-batch path of `ndcg` and `NDCG.update`: the same numbers, in one straight line.

It earns its place (`python benchmarks/bench_paths.py`, this path against the general path
switched on in its stead, one thread of a 2-core CPU, torch 2.13):

| input | general path | this path | saving |
|---|---|---|---|
| `ndcg`, ``[8, 10]``, ``k=10`` | 106 us | 56 us | 1.88x |
| `NDCG.update`, ``[8, 10]``, ``k=[1, 5, 10]`` | 100 us | 53 us | 1.88x |

A metric update or an ``ndcg`` call on a few short lists costs its Python layers and its
launches, not its arithmetic. For the usual input, decided from metadata alone (`plan`), this
module runs the whole computation in one function (`small_ndcg`), its constants from the one
table cache (`torch_ndcg._tables`):

1. the top ``k + 1`` scores of each row (``topk``): the ranking, and whether a tie touches
   the top ``k`` (two equal neighbours among them);
2. the extremes of the scores and labels, read back with the tie flag (the call's one
   read-back), handed to the caller for the input checks (`torch_ndcg._validation`, at the
   edge: this module imports no check);
3. the gains $g(y)$; the top positions' gains, tie-averaged where a tie was found
   (`torch_ndcg._kernels.tie_averaged_gains`); the ideal gains, the ``k`` largest;
4. both DCGs by products with the cut-off discount matrix,
   $\mathrm{DCG@}k = \sum_{r \le k} g_r \, d(r)$, and nDCG as their quotient
   (`torch_ndcg._kernels.normalize`).

These are the steps of the general small-batch path of `torch_ndcg._fast_paths.dcg_and_ideal`,
in the same order on the same values, without its dispatch among paths. The numbers agree with
the general path's to rounding, not always to the last bit: the two DCG products may sum their
terms in another order (seen: one float64 unit in the last place), so each nDCG is within
$4 \varepsilon \max(1, |x|)$ of the general path's, $\varepsilon$ the machine epsilon of the
result's dtype, and a metric's float64 sums within $4 \varepsilon$ times the lists added
(`tests/test_small_batch.py` holds that bound).

Anything else (a mask or ``exclude``, ``ignore_index``, a callable gain or discount,
``ties="first"``, ``empty_target_action="error"``, half-precision scores, more than
`torch_ndcg._fast_paths.SMALL_ELEMENTS` items, another device than the CPU, autocast,
``torch.compile``, the accelerator paths that tests take on the CPU) takes the general path; so
do float scores that look like graded labels with float labels, whose swapped-arguments hint
needs passes of its own.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torch_ndcg import _gains, _host, _kernels
from torch_ndcg._fast_paths import SMALL_ELEMENTS
from torch_ndcg._options import ListOptions

# Score dtypes of the small CPU paths (half precision is computed in float32: general path).
SCORE_DTYPES = frozenset({torch.float32, torch.float64})


def small_cpu_pair(preds: Any, target: Any) -> bool:
    """Whether ``preds`` and ``target`` are a small batch for the CPU's small paths, eagerly.

    Dense tensors of one shape with 1 to `torch_ndcg._fast_paths.SMALL_ELEMENTS` items, where a
    value may be read back (`torch_ndcg._host.may_read_back`: the CPU, outside
    ``torch.compile``): metadata alone. Also the test of the losses' small-batch checks.
    """
    return (
        type(preds) is Tensor
        and type(target) is Tensor
        and preds.layout == torch.strided
        and target.layout == torch.strided
        and preds.shape == target.shape
        and preds.ndim > 0
        and 0 < preds.numel() <= SMALL_ELEMENTS
        and target.is_cpu
        and _host.may_read_back(preds.device)
    )


def takes_small_path(preds: Any, target: Any, options: ListOptions) -> bool:
    """Whether a batch takes the small path, from metadata alone.

    ``preds`` and ``target`` may be anything: what is not a pair of dense CPU tensors of one
    shape goes to the general path, whose checks name what is wrong.
    """
    return (
        small_cpu_pair(preds, target)
        and not torch.is_autocast_enabled("cpu")
        and _gains.named(options.gain)
        and isinstance(options.discount, str)
        and options.ties == "average"
        and options.empty_target_action != "error"
        and options.ignore_index is None
        and preds.shape[-1] > 1
        and preds.dtype in SCORE_DTYPES
        and not target.dtype.is_complex
        # Float labels wider than the scores would round, a tiny negative one to -0.0.
        and not (target.dtype.is_floating_point and target.dtype.itemsize > preds.dtype.itemsize)
    )


def small_ndcg(
    preds: Tensor, target: Tensor, options: ListOptions
) -> tuple[Tensor, list[float] | None]:
    """The nDCG of the rows of ``[..., L]`` ``preds`` and ``target``, ``[N, len(k)]`` float64.

    For a batch that `takes_small_path`. Returns the values and, with ``validate_args``, the
    extremes the checks judge, read back with the tie flag: ``[smallest score, largest score,
    smallest label, largest label]`` (``None`` without ``validate_args``). Where they break a
    check the caller discards the values and takes the general path, which raises the error.
    """
    scores, labels = preds, target
    length = preds.shape[-1]
    if preds.ndim != 2:  # a reshape costs a microsecond: not where it is not needed
        scores, labels = preds.reshape(-1, length), target.reshape(-1, length)
    ks, kmax = options.cutoffs.resolve(length)
    # Labels in the scores' dtype, as the gains take them: exact for the labels of the small
    # path, but for integers past 2^24 in float32, which round on the right side of every
    # limit the checks set.
    float_labels = labels.to(scores.dtype)
    top_scores, top_index = scores.topk(min(kmax + 1, length), dim=-1, sorted=True)
    # The largest step down between neighbours of the top k + 1, each best first: 0 where a
    # tie touches the top k, NaN where two equal infinite scores do, else negative.
    read = [top_scores.diff(dim=-1).amax()]
    if options.validate_args:  # the extremes of the scores and labels, in the one read-back
        read = [*torch.aminmax(scores), *torch.aminmax(float_labels), *read]
    *extremes, largest_step = torch.stack(read).tolist()
    item_gains = _kernels.gains(float_labels, options.gain)
    top_index = top_index.narrow(-1, 0, kmax)
    if not largest_step < 0:  # a tie
        position_gains = _kernels.tie_averaged_gains(
            scores, top_scores.narrow(-1, 0, kmax), top_index, item_gains
        )
    else:
        position_gains = item_gains.gather(-1, top_index)
    ideal_gains = item_gains.topk(kmax, dim=-1, sorted=True).values
    weights = _kernels.cutoff_matrix(kmax, ks, options.discount, torch.float64, scores.device)
    dcg = position_gains.to(torch.float64).mm(weights)
    ideal = ideal_gains.to(torch.float64).mm(weights)
    values = _kernels.normalize(dcg, ideal, options.empty_target_action, options.gain)
    return values, extremes if options.validate_args else None
