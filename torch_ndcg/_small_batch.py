r"""The small-batch path of `ndcg` and `NDCG.update`: the same numbers, in one straight line.

A metric update or an ``ndcg`` call on a few short lists costs its Python layers and its
launches, not its arithmetic. For the usual input, decided from metadata alone (`plan`), this
module runs the whole computation in one function (`small_ndcg`) with the per-input constants
built once (`SmallPlan`, kept per input kind):

1. the top ``k + 1`` scores of each row (``topk``): the ranking, and whether a tie touches
   the top ``k`` (two equal neighbours among them);
2. the extremes of the scores and labels, read back with the tie flag (the call's one
   read-back) and judged by the input checks' rules (`torch_ndcg._validation`);
3. the gains $g(y)$; the top positions' gains, tie-averaged where a tie was found
   (`torch_ndcg._kernels.tie_averaged_gains`); the ideal gains, the ``k`` largest;
4. both DCGs in one product with the cut-off discount matrix,
   $\mathrm{DCG@}k = \sum_{r \le k} g_r \, d(r)$, and nDCG as their quotient
   (`torch_ndcg._kernels.normalize`).

These are the steps of the general small-batch path of `torch_ndcg._fast_paths.dcg_and_ideal`,
in the same order on the same values (so the same numbers to the last bit), without its
dispatch among paths. Anything else (a mask or ``exclude``, ``ignore_index``, a callable gain
or discount, ``ties="first"``, ``empty_target_action="error"``, half-precision scores, more
than `torch_ndcg._fast_paths.SMALL_ELEMENTS` items, another device than the CPU, autocast,
``torch.compile``, the accelerator paths that tests take on the CPU) takes the general path;
so do float scores that look like graded labels with float labels, whose swapped-arguments
hint needs passes of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from torch_ndcg import _host, _kernels, _validation
from torch_ndcg._fast_paths import SMALL_ELEMENTS
from torch_ndcg._options import ListOptions

# Score dtypes of the small CPU paths (half precision is computed in float32: general path).
SCORE_DTYPES = frozenset({torch.float32, torch.float64})
_CPU = torch.device("cpu")


@dataclass(frozen=True)
class SmallPlan:
    """What a small batch of one input kind needs besides its tensors, built once.

    Attributes:
        options: the checked options.
        kmax: positions the cut-offs need, ``min(max(k), L)``.
        selected: items ``topk`` selects: ``kmax + 1`` (to see a tie across the cut-off), at
            most ``L`` (at least 2: lists of one item take the general path).
        weights: ``[kmax, len(k)]`` float64 cut-off discount matrix.
        rules: the input checks of this input kind, ``None`` with ``validate_args=False``.
        integer_labels: whether the labels are bool or integers (no swapped-arguments hint).
    """

    options: ListOptions
    kmax: int
    selected: int
    weights: Tensor
    rules: tuple[Any, ...] | None
    integer_labels: bool


# Plans of up to this many input kinds (options, lengths, dtypes) are kept.
_KEPT_PLANS = 64
# Each kind's plan, or None for a kind that takes the general path.
_plans: dict[tuple[Any, ...], SmallPlan | None] = {}


def _new_plan(options: ListOptions, length: int, preds: Tensor, target: Tensor) -> SmallPlan:
    ks, kmax = options.cutoffs.resolve(length)
    float_labels = target.is_floating_point()
    rules = None
    if options.validate_args:
        rules = tuple(
            _validation.eager_rules(
                options.gain, preds.dtype, length, _CPU, None, False, float_labels
            )
        )
    return SmallPlan(
        options=options,
        kmax=kmax,
        selected=min(kmax + 1, length),
        weights=_kernels.cutoff_matrix(kmax, ks, options.discount, torch.float64, _CPU),
        rules=rules,
        integer_labels=not float_labels,
    )


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


def plan(preds: Any, target: Any, options: ListOptions) -> SmallPlan | None:
    """The plan of a batch that takes the small path (from metadata alone), else ``None``.

    ``preds`` and ``target`` may be anything: what is not a pair of dense CPU tensors of one
    shape goes to the general path, whose checks name what is wrong.
    """
    if not (small_cpu_pair(preds, target) and not torch.is_autocast_enabled("cpu")):
        return None
    length = preds.shape[-1]
    # The options by identity: a kept plan holds them, so their id is not reused meanwhile.
    key = (id(options), length, preds.dtype, target.dtype)
    found = _plans.get(key, _UNSEEN)
    if found is _UNSEEN:
        if len(_plans) >= _KEPT_PLANS:
            _plans.pop(next(iter(_plans)))
        eligible = _eligible(options, length, preds.dtype, target.dtype)
        _plans[key] = found = _new_plan(options, length, preds, target) if eligible else None
    return found  # type: ignore[return-value]


_UNSEEN = object()


def _eligible(
    options: ListOptions, length: int, score_dtype: torch.dtype, label_dtype: torch.dtype
) -> bool:
    """Whether options and dtypes let lists of ``length`` items take the small path."""
    return (
        isinstance(options.gain, str)
        and isinstance(options.discount, str)
        and options.ties == "average"
        and options.empty_target_action != "error"
        and options.ignore_index is None
        and length > 1
        and score_dtype in SCORE_DTYPES
        and not label_dtype.is_complex
        # Float labels wider than the scores would round, a tiny negative one to -0.0.
        and not (label_dtype.is_floating_point and label_dtype.itemsize > score_dtype.itemsize)
    )


def small_ndcg(preds: Tensor, target: Tensor, plan: SmallPlan) -> Tensor | None:
    """The nDCG of the rows of ``[..., L]`` ``preds`` and ``target``, ``[N, len(k)]`` float64.

    Returns ``None`` where the general path must take the batch: input that breaks a check
    (the general path raises the error, naming the exact value) or that may call for the
    swapped-arguments hint.
    """
    scores, labels = preds, target
    if preds.ndim != 2:
        length = preds.shape[-1]
        scores, labels = preds.reshape(-1, length), target.reshape(-1, length)
    # Labels in the scores' dtype, as the gains take them: exact for the labels of the small
    # path (`plan`), but for integers past 2^24 in float32, which round on the right side of
    # every limit the checks set.
    float_labels = labels.to(scores.dtype)
    kmax = plan.kmax
    top_scores, top_index = scores.topk(plan.selected, dim=-1, sorted=True)
    # The largest step down between neighbours of the top k + 1, each best first: 0 where a
    # tie touches the top k, NaN where two equal infinite scores do, else negative.
    largest_step = top_scores.diff(dim=-1).amax()
    if plan.rules is None:
        tie_found = not bool(largest_step < 0)
    else:
        # One read-back: the extremes of the scores and labels, and the largest step.
        low_pred, high_pred, low, high, step = torch.stack(
            [*torch.aminmax(scores), *torch.aminmax(float_labels), largest_step]
        ).tolist()
        if not _validation.rules_hold(plan.rules, low_pred, high_pred, low, high) or (
            not plan.integer_labels and _validation.label_like(low_pred, high_pred)
        ):
            return None
        tie_found = not step < 0
    options = plan.options
    item_gains = _kernels.gains(float_labels, options.gain)
    if tie_found:
        position_gains = _kernels.tie_averaged_gains(
            scores, top_scores.narrow(-1, 0, kmax), item_gains
        )
    else:
        position_gains = item_gains.gather(-1, top_index.narrow(-1, 0, kmax))
    ideal_gains = item_gains.topk(kmax, dim=-1, sorted=True).values
    both = torch.cat([position_gains, ideal_gains]).to(torch.float64).mm(plan.weights)
    dcg, ideal = both.chunk(2)
    return _kernels.normalize(dcg, ideal, options.empty_target_action, options.gain)
