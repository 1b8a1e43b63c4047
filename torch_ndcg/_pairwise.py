"""Blockwise pairwise terms of the ranking losses, as custom autograd Functions.

Both losses need a sum over all pairs of items of a list. Materialising the ``[N, L, L]`` pair
tensors (and keeping them for backward, as autograd would) costs ``O(N L^2)`` memory. Here the
pairs are visited in blocks of rows, ``[N, rows, cols]`` with ``N * rows * cols`` about
`BLOCK_ELEMENTS`, and each Function computes its own gradient blockwise, so the extra memory
is a few blocks plus ``O(N L)`` tensors whatever the list length.

Small batches (`DENSE_PAIR_ELEMENTS` pairs or fewer) are the exception: their cost is the
number of operations, autograd nodes and the Python around them, not memory, so they take whole
``[N, L, L]`` tensors, and each loss is one autograd Function that computes the reduced loss
and its hand-derived gradient together (`DensePairwiseLogistic`, `DenseApproxNDCG`, for a named
discount), the same numbers to rounding. They earn their place (a loss step, forward and
backward of the module with its defaults, dense path on and off, CPU, one thread, torch 2.13):

| loss | batch | on (ms) | off (ms) | saving |
|---|---|---|---|---|
| LambdaRankLoss | [8, 10] | 0.253 | 0.368 | 1.45x |
| ApproxNDCGLoss | [8, 10] | 0.319 | 0.440 | 1.38x |
| LambdaRankLoss | [8, 64] | 0.359 | 0.530 | 1.47x |
| ApproxNDCGLoss | [8, 64] | 0.298 | 0.433 | 1.45x |
| LambdaRankLoss | [32, 32] | 0.361 | 0.537 | 1.49x |
| ApproxNDCGLoss | [32, 32] | 0.304 | 0.452 | 1.49x |
| LambdaRankLoss | [128, 16] | 0.401 | 0.604 | 1.51x |
| ApproxNDCGLoss | [128, 16] | 0.336 | 0.446 | 1.33x |

Command: ``python benchmarks/bench_loss_paths.py`` (2026-12-02, one thread of a 2-core CPU,
torch 2.13). Without them the loss rows of ``benchmarks/bench_host.py`` at ``[8, 10]`` took
1.65x (LambdaRank) and 1.83x (ApproxNDCG) of the library of 2026-11-24, past the 1.25x their
host time may grow. A callable discount of ApproxNDCG takes the blockwise path
(autograd over dense tensors saved it only 1.13-1.27x).

Everything here assumes validated, float32 or float64, ``[N, L]`` input; no checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from torch_ndcg import _tables
from torch_ndcg._kernels import full_precision, position_discounts
from torch_ndcg._options import Discount

# Elements of one block temporary on the CPU: 2^18 float32 = 1 MiB, so the handful of live
# temporaries stays within a core's 2 MiB L2 cache on the machine the benchmarks ran on. Tests
# lower it to force many blocks.
BLOCK_ELEMENTS = 1 << 18
# On an accelerator a step is bound by its kernel launches, a few per block whatever the block's
# size. A block of the pair loss keeps three temporaries: 2^23 float32 (32 MiB each) makes 16
# lists of 1,024 two blocks. The smooth ranks keep one, so their blocks are twice as large: the
# same 16 lists are one block of 64 MiB.
ACCELERATOR_BLOCK_ELEMENTS = 1 << 23
ACCELERATOR_SINGLE_TEMPORARY_BLOCK_ELEMENTS = 1 << 24


def accelerator_blocks(device: torch.device) -> bool:
    """Whether ``device`` takes the accelerator's block sizes: every device but the CPU."""
    return device.type != "cpu"


def _row_blocks(
    like: Tensor, rows: int, *, upper: bool = False, accelerator: int = ACCELERATOR_BLOCK_ELEMENTS
) -> list[tuple[int, int]]:
    """Row ranges ``[i0, i1)`` covering ``0..rows`` of ``[N, L]`` lists ``like``, each a block.

    A block is about `BLOCK_ELEMENTS` elements on the CPU; on an accelerator ``accelerator``:
    `ACCELERATOR_BLOCK_ELEMENTS`, or `ACCELERATOR_SINGLE_TEMPORARY_BLOCK_ELEMENTS` for a
    computation that keeps one block temporary at a time.
    With ``upper`` the block of rows ``[i0, i1)`` spans columns ``i0 + 1 .. length`` only (the
    strict upper triangle), so later blocks take more rows. An empty batch has no block.
    """
    n_lists, length = like.shape
    block = accelerator if accelerator_blocks(like.device) else BLOCK_ELEMENTS
    blocks, i0 = [], 0
    while i0 < rows and n_lists > 0:
        cols = length - (i0 + 1) if upper else length
        i1 = min(rows, i0 + max(1, block // max(1, n_lists * cols)))
        blocks.append((i0, i1))
        i0 = i1
    return blocks


def _by_rows(
    like: Tensor, blocks: list[tuple[int, int]], rows_of: Callable[[int, int], Tensor]
) -> Tensor:
    """An ``[N, L]`` tensor whose rows ``[i0, i1)`` are ``rows_of(i0, i1)``, block by block.

    One block's result is returned as it is (no copy); each block's temporaries are freed before
    the next block is made.
    """
    if len(blocks) == 1:
        return rows_of(*blocks[0])
    out = like.new_empty(like.shape)
    for i0, i1 in blocks:
        out[:, i0:i1] = rows_of(i0, i1)
    return out


# Pair weight tables of at most this many elements (4 MiB of float32) are built once per call
# instead of once per block, and kept between calls (`torch_ndcg._tables`).
PAIR_TABLE_ELEMENTS = 1 << 20


# Batches of at most this many pairs in all (``N L^2``: 8 lists of 64 items, 128 of 16) take
# the dense paths of the losses: the pair tensors are small, so a call's cost is its operations
# and its Python, not its memory. There the pairs are one ``[N, L, L]`` tensor and the loss one
# autograd node (`KeptGradient`): no blocks, the fewest operations. Decided from the shape
# only, so the same batch takes the same path on every device.
DENSE_PAIR_ELEMENTS = 1 << 15


def dense_pairs_fit(n_lists: int, length: int) -> bool:
    """Whether ``n_lists`` lists of ``length`` take the dense paths (`DENSE_PAIR_ELEMENTS`)."""
    return n_lists * length * length <= DENSE_PAIR_ELEMENTS


@_tables.kept
def lambda_tables(
    discount: Discount, sizes: tuple[int, int, int], weighting: tuple[str, float], dense: bool,
    dtype: torch.dtype, device: torch.device,
) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None]:
    r"""The constant tables of a LambdaLoss ``weighting``, kept together under one key.

    ``sizes`` are ``(rows, length, kmax)``, ``weighting`` is ``(weighting, mu)``.

    ``(position_discounts, delta, pair_table, square_table)``: the discounts $D_1..D_L$ cut at
    ``kmax`` (0 below), for ``"lambdarank"`` and ``"ndcg2pp"``; $\delta_m = |D_m - D_{m+1}|$
    (times ``mu`` for ``"ndcg2pp"``), for ``"ndcg2"`` and ``"ndcg2pp"``; ``None`` where the
    weighting has no such term. These are what `pair_position_weights` takes. ``pair_table``:
    those weights of all ``rows`` at once, ``[rows, L - 1]`` (column ``c`` is position
    ``c + 1``, so the block of rows ``[i0, i1)`` is ``table[i0:i1, i0:]``), when that is at
    most `PAIR_TABLE_ELEMENTS` elements or the batch is ``dense``, else ``None``.
    ``square_table``: the same weights as a symmetric square ``[L, L]``, ``W[i, j]`` for
    positions ``i < j`` and ``W[j, i]`` (0 on the diagonal and where both positions are past
    ``rows``), for a batch that takes the dense paths (``dense``, see `dense_pairs_fit`), else
    ``None``. All four are kept for named discounts (see `torch_ndcg._tables`): a training loop
    asks for the same tables every step.
    """
    (rows, length, kmax), (weighting_name, mu) = sizes, weighting
    cut_discounts = delta = None
    # Discounts of ranks 1..L+1: the first L serve the |D_i - D_j| terms, all the gaps.
    discounts = position_discounts(length + 1, discount, dtype=dtype, device=device)
    if weighting_name in ("lambdarank", "ndcg2pp"):
        cut_discounts = discounts[:length].clone()
        cut_discounts[kmax:] = 0
    if weighting_name in ("ndcg2", "ndcg2pp"):
        # delta[m] = |D(m) - D(m + 1)| for a rank gap m >= 1; delta[0] is never used.
        delta = torch.cat([discounts.new_zeros(1), (discounts[:-2] - discounts[1:-1]).abs()])
        if weighting_name == "ndcg2pp":
            delta = delta * mu
    table = square_table = None
    if dense or rows * (length - 1) <= PAIR_TABLE_ELEMENTS:  # (no rows: an empty table)
        table = pair_position_weights((cut_discounts, delta, None), 0, rows, length)
    if dense and table is not None:
        upper = discounts.new_zeros(length, length)
        upper[:rows, 1:] = table
        square_table = upper + upper.T  # no overlap: exact
    return cut_discounts, delta, table, square_table


class Pairs(NamedTuple):
    """The pairs a per-list pairwise loss sums over, as its autograd Function takes them.

    ``weights``: the first three of `lambda_tables` (``position_discounts`` / ``delta`` for
    `pair_position_weights`, or ``pair_table``, all of them at once); ``rows``: the positions
    that can be the upper item of a pair (k, or L); ``sigma``: the scale of score differences.
    """

    weights: tuple[Tensor | None, ...]
    rows: int
    sigma: float


def pair_position_weights(
    weights: tuple[Tensor | None, ...], i0: int, i1: int, length: int
) -> Tensor:
    r"""The part of the LambdaLoss pair weights that depends on rank positions only.

    For rank positions $i \in [i_0, i_1)$ and $j \in (i_0, L)$:
    $W_{ij} = [j > i] \, (|D_i - D_j| + \delta_{j - i})$ where, of ``weights`` (the first
    three of `lambda_tables`: ``(position_discounts, delta, pair_table)``),
    ``position_discounts`` holds $D$ (already cut at k) and ``delta`` the NDCG-Loss2 table
    $\delta_m$ (already scaled by mu); either may be ``None`` (left out). Cut from
    ``pair_table``, these weights of all rows, when there is one. Shape
    ``[i1 - i0, L - i0 - 1]``.
    """
    position_discounts, delta, pair_table = weights
    if pair_table is not None:
        return pair_table[i0:i1, i0:]
    device = next(table for table in weights if table is not None).device
    gap = torch.arange(i0 + 1, length, device=device) - torch.arange(i0, i1, device=device)[:, None]
    terms = 0 if delta is None else delta[gap.clamp(min=0)]
    if position_discounts is not None:
        terms = (position_discounts[i0:i1, None] - position_discounts[None, i0 + 1 :]).abs() + terms
    return torch.where(gap > 0, terms, 0)


def reduce_losses(
    per_list: Tensor,
    counted: Tensor,
    reduction: str,
    leading_shape: torch.Size,
    grad: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Reduced per-list losses, and their ``[N, L]`` gradient ``grad`` (or ``None``) reduced so.

    ``"none"``: per list, in ``leading_shape``; ``"sum"``; ``"mean"`` over the lists in
    ``counted`` (0 if none). ``per_list`` is 0 on the lists not counted (each loss sets it so with
    ``torch.where``, so that a list whose terms overflowed on unchecked input adds nothing, not
    NaN). The gradient of the reduced loss is the lists' gradient over the divisor of ``"mean"``
    (divided in place), as it is (`KeptGradient`).
    """
    if reduction == "none":
        return per_list.reshape(leading_shape), grad
    total = per_list.sum()
    if reduction == "sum":
        return total, grad
    divisor = mean_divisor(counted, total.dtype)
    return total / divisor, None if grad is None else grad.div_(divisor)


def mean_divisor(counted: Tensor, dtype: torch.dtype) -> Tensor:
    """The divisor of ``"mean"``: the number of lists in ``counted``, at least 1, in ``dtype``."""
    return counted.sum(dtype=dtype).clamp_(min=1)


class KeptGradient(torch.autograd.Function):
    r"""A reduced loss whose forward computes its gradient too: backward only scales it.

    Where a step's host time is its operations, autograd nodes and Python (the small batches
    of the dense paths, `dense_pairs_fit`; RankNet, ListMLE) the whole loss is one node, whose
    gradient is computed with the loss under no grad (as `PairwiseLogistic`'s) and kept.
    (A loss of a few operations, as the softmax cross-entropy, costs less as plain autograd.)
    Subclasses take the ``[N, L]`` scores and one tuple of everything else (tensors that need
    no gradient, options): one argument fewer to unpack per argument saved. Their ``forward``
    ends in `reduced`. Under ``create_graph`` the first derivative is right and a second one
    raises.
    """

    @staticmethod
    def reduced(
        ctx: Any, s: Tensor, per_list: Tensor, grad: Tensor | None, reducing: tuple[Any, ...]
    ) -> Tensor:
        """``per_list`` reduced (`reduce_losses`), its gradient ``grad`` kept for backward.

        ``s``: the scores (the input); ``reducing``: the counted lists, the reduction and the
        leading shape.
        """
        counted, reduction, leading_shape = reducing
        loss, kept = reduce_losses(per_list, counted, reduction, leading_shape, grad)
        # The scores only for their graph edge (`_no_second_derivative`), freed with the rest.
        ctx.save_for_backward(kept, s)
        ctx.per_list = reduction == "none"
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor) -> tuple[Tensor | None, ...]:
        grad, scores = ctx.saved_tensors
        grad_scores = grad_loss.reshape(-1, 1) * grad if ctx.per_list else grad_loss * grad
        if torch.is_grad_enabled():  # create_graph: a second derivative would come out wrong
            grad_scores = _no_second_derivative(grad_scores, scores)
        return grad_scores, None


def _no_second_derivative(grad: Tensor, scores: Tensor) -> Tensor:
    """``grad``, whose derivative raises: it leads back to ``scores``, which it depends on.

    (`once_differentiable` leads its error to a detached copy, which ``torch.autograd.grad``
    with respect to the scores never meets: "not used in the graph", and Hessians of 0.)
    """
    error = torch._C._functions.DelayedError(
        b"This loss keeps the gradient its forward computed: it has no derivative of its own "
        b"(no second derivative).",
        2,
    )
    return error(grad.detach().requires_grad_(), scores)[0]


class DensePairwiseLogistic(KeptGradient):
    r"""`PairwiseLogistic`'s loss of a small batch, reduced, from whole ``[N, L, L]`` tensors.

    The same terms, $|g_i - g_j| \, W_{ij} \, \mathrm{softplus}(-\sigma (u_w - u_l))$ over
    the pairs of rank positions $i < j$, for a batch that `dense_pairs_fit`: no blocks, and
    one autograd node (`KeptGradient`). ``s`` are the ``[N, L]`` scores in the input's item
    order; ``given`` holds ``order``, the rank order (best first), ``g``, the gains over the
    ideal DCG, and ``valid``, the real items (or ``None``), both in rank order, ``table``,
    `lambda_tables`' ``square_table``, ``counted``, the ``[N]`` lists whose loss counts (the
    others are 0; ``None``: all), ``has_relevant``, the lists ``"mean"`` averages over, then
    ``sigma``, the ``reduction``, the batch's ``leading_shape`` and whether to compute the
    gradient (``need_grad``).

    Over the ordered pairs, with the weight $w_{ij} = \max(g_i - g_j, 0) \, W_{ij}$ (``table``
    is symmetric) of item $i$ that should rank above $j$, each pair is one term
    $w_{ij} \, \mathrm{softplus}(z_{ij})$, $z_{ij} = \sigma (u_j - u_i)$, and the gradient is
    $\partial \ell / \partial u_m = \sigma \sum_i (S_{im} - S_{mi})$ with
    $S_{ij} = w_{ij} \operatorname{sigmoid}(z_{ij})$.
    """

    @staticmethod
    def forward(ctx: Any, s: Tensor, given: tuple[Any, ...]) -> Tensor:
        order, g, valid, table, counted, has_relevant = given[:6]
        sigma, reduction, leading_shape, need_grad = given[6:]
        u = s.gather(-1, order)
        weight = torch.sub(g.unsqueeze(2), g.unsqueeze(1)).clamp_(min=0).mul_(table)
        if valid is not None:  # pairs of real items only (a callable gain may be negative)
            weight.mul_(valid.unsqueeze(1)).mul_(valid.unsqueeze(2))
        # -sigma (u_w - u_l): the difference is taken before scaling, as in PairwiseLogistic.
        z = torch.sub(u.unsqueeze(1), u.unsqueeze(2))
        if sigma != 1:
            z.mul_(sigma)
        per_list = F.softplus(z).mul_(weight).sum((1, 2))
        grad = None
        if need_grad:
            slope = z.sigmoid_().mul_(weight)
            grad = slope.sum(1).sub_(slope.sum(2))
            grad = grad.scatter(-1, order, grad)  # back to the input's item order
            if sigma != 1:
                grad.mul_(sigma)
        if counted is not None:
            per_list = torch.where(counted, per_list, 0)
            grad = None if grad is None else torch.where(counted.unsqueeze(1), grad, 0)
        return KeptGradient.reduced(
            ctx, s, per_list, grad, (has_relevant, reduction, leading_shape)
        )


class DenseApproxNDCG(KeptGradient):
    r"""Reduced ApproxNDCG loss of a small batch (`dense_pairs_fit`), a named discount.

    With the smooth ranks of `SmoothRanks`, $\hat r_i = \frac12 + \sum_j v_j
    \sigma((s_j - s_i)/T)$ from one ``[N, L, L]`` tensor (padded items at rank 1), the loss is
    $1 - \sum_i g_i D(\hat r_i) c_i$, with the smooth cut-off
    $c_i = \sigma((k + \frac12 - \hat r_i) / T)$ where ``kmax`` is below the length, in
    the lists ``cut`` (``[N, 1]`` bool; ``None``: every list), else $c_i = 1$; 0 outside
    ``counted`` (``[N]`` bool, the lists ``"mean"`` averages over). ``s`` are the ``[N, L]``
    scores; ``given`` holds ``real``, the real items (or ``None``), ``g``, the gains over the
    ideal DCG (0 on padding), ``cut``, ``counted``, then the ``discount``,
    ``"log2"`` ($D(r) = 1 / \log_2(r + 1)$) or ``"jarvelin"`` ($1 / \max(1, \log_2 r)$), the
    ``temperature``, ``kmax``, the ``reduction``, the batch's ``leading_shape`` and whether to
    compute the gradient.

    One autograd node (`KeptGradient`): with $\bar g_i = \partial \ell / \partial \hat r_i =
    -g_i (D'(\hat r_i) c_i + D(\hat r_i) c'_i)$, $c' = -c (1 - c) / T$, the gradient is
    `SmoothRanks`' $(v_m (Q \bar g)_m - \bar g_m (Q v)_m) / T$ with
    $Q_{ij} = \sigma'((s_j - s_i)/T)$, that is $\sum_i Q_{mi} (\bar g_i - \bar g_m) / T$
    where every item is real.
    """

    @staticmethod
    def forward(ctx: Any, s: Tensor, given: tuple[Any, ...]) -> Tensor:
        real, g, cut, counted = given[:4]
        discount, temperature, kmax, reduction, leading_shape, need_grad = given[4:]
        above = SmoothRanks._above(s, 0, s.shape[-1], temperature)
        v = None if real is None else real.to(s.dtype)
        # The smooth ranks (1 on padding) plus the argument of the discount's log2: r + 1
        # ("log2"), or r ("jarvelin").
        shift = 1.0 if discount == "log2" else 0.0
        if v is None:
            shifted = above.sum(-1).add_(0.5 + shift)
        else:
            shifted = (above * v.unsqueeze(1)).sum(-1).add_(0.5 + shift)
            shifted = torch.where(real, shifted, 1 + shift)
        logs = torch.log2(shifted)
        terms = g / (logs if discount == "log2" else logs.clamp(min=1))
        smooth_cut = None
        cut_terms = terms
        if kmax < s.shape[-1]:
            # (torch.rsub: a number minus a tensor without Tensor.__rsub__'s Python.)
            smooth_cut = torch.rsub(shifted, kmax + 0.5 + shift).div_(temperature).sigmoid_()
            if cut is not None:
                smooth_cut = torch.where(cut, smooth_cut, 1)
            cut_terms = terms * smooth_cut
        grad = None
        if need_grad:
            # d loss / d rank: -g D'(r) c - g D(r) c', with D' = -D / (log2(x) x ln 2) where
            # the log is not clamped, x the shifted rank: log2(x) x ln 2 = x ln x.
            slope = terms / torch.xlogy(shifted, shifted)
            if discount != "log2":
                slope = torch.where(logs >= 1, slope, 0)  # the clamp's flat part
            if smooth_cut is not None:
                # 1 - c is 0 where the list is not cut (c = 1 there): no slope of the cut.
                rest = torch.rsub(smooth_cut, 1).mul_(cut_terms)
                slope.mul_(smooth_cut).add_(rest if temperature == 1 else rest.div_(temperature))
            q = torch.addcmul(above, above, above, value=-1)  # sigma' = sigma (1 - sigma)
            if v is None:
                grad = q.mul_(torch.sub(slope.unsqueeze(1), slope.unsqueeze(2))).sum(-1)
            else:
                grad = v * (q * slope.unsqueeze(1)).sum(-1) - slope * (q * v.unsqueeze(1)).sum(-1)
            if temperature != 1:
                grad = grad / temperature
            grad = torch.where(counted.unsqueeze(1), grad, 0)
        per_list = torch.where(counted, torch.rsub(cut_terms.sum(-1), 1), 0)
        return KeptGradient.reduced(ctx, s, per_list, grad, (counted, reduction, leading_shape))


class _KeptPerList(torch.autograd.Function):
    """A per-list loss whose forward saved its ``[N, L]`` gradient: backward scales it."""

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_loss: Tensor, *_: Tensor) -> tuple[Tensor | None, ...]:
        (grad,) = ctx.saved_tensors
        return (grad_loss[:, None] * grad, *[None] * (len(ctx.needs_input_grad) - 1))


class PairwiseLogistic(_KeptPerList):
    r"""Per-list $\sum_{i<j} |g_i - g_j| \, W_{ij} \, \log(1 + e^{-(u_w - u_l)})$, blockwise.

    Inputs are in the current rank order (position = rank, so $u_i \ge u_j$ for
    $i < j$): ``u`` the scores (scaled by ``sigma`` pair by pair, after the difference
    is taken, so that no score overflows), ``g`` the gains divided by the ideal DCG,
    ``valid`` the real items (or ``None``), ``pairs`` the `Pairs` (weights, rows, sigma).
    $u_w$ is the score of the item with the larger gain. The gradient is
    computed during forward (one pass over the pairs) and kept as one ``[N, L]`` tensor.
    `FactoredPairwiseLogistic` weighs the pairs by a factor per item and returns each item's
    share of the pair losses too.
    """

    @staticmethod
    def forward(
        ctx: Any, u: Tensor, g: Tensor, valid: Tensor | None, pairs: Pairs, need_grad: bool
    ) -> Tensor:
        (weights, rows, sigma), (n_lists, length) = pairs, u.shape
        loss = u.new_zeros(n_lists)
        grad = torch.zeros_like(u) if need_grad else None
        for i0, i1 in _row_blocks(u, rows, upper=True):
            c0 = i0 + 1
            # Gain difference g_j - g_i; its sign says which item should rank higher.
            gain_gap = g[:, None, c0:] - g[:, i0:i1, None]
            # u_i - u_j >= 0 in rank order; z = -sigma (u_w - u_l), the logistic loss argument.
            # The difference is taken before scaling: sigma * u may overflow where it does not.
            z = (u[:, i0:i1, None] - u[:, None, c0:]).mul_(sigma).copysign_(gain_gap)
            weight = gain_gap.abs_().mul_(pair_position_weights(weights, i0, i1, length))
            if valid is not None:
                weight.mul_(valid[:, None, c0:])
            pair_losses = F.softplus(z).view(n_lists, -1, 1)
            with full_precision(u.device):
                loss += torch.bmm(weight.view(n_lists, 1, -1), pair_losses).view(n_lists)
            if grad is not None:
                # The slope, in place: d loss / d z = weight * sigmoid(z), and
                # dz/du_i = sigma sign(g_j - g_i).
                weight.copysign_(z).mul_(z.sigmoid_())
                grad[:, i0:i1].add_(weight.sum(dim=-1))
                grad[:, c0:].sub_(weight.sum(dim=1))
            # Freed before the next block is made: one block's temporaries alive at a time.
            del gain_gap, z, weight, pair_losses
        if grad is not None:
            ctx.save_for_backward(grad.mul_(sigma))
        return loss


class FactoredPairwiseLogistic(_KeptPerList):
    r"""`PairwiseLogistic` with a factor per item, and each item's share of the pair losses.

    Each pair's weight is multiplied by the factors of both its items, $f_w f_l$ (``factor``,
    ``[N, L]`` in rank order, 0 for the items that take no part: it is the mask too). Returns
    the per-list loss and ``[N, L]`` shares (rank order): each item's sum over its pairs of the
    pair loss times the *other* item's factor, $\sum_l L_{wl} f_l$ (the statistics of the
    position biases). A block holds the logistic loss and slope of its pairs side by side,
    ``[N, rows, 2, cols]``, unweighted by the factors: its row sums against the lower items'
    factors and its column sums against the upper items' are two batched products, which give
    the shares, the loss and the gradient at once (each item's own factor is applied once, at
    the end). Three block temporaries, as `PairwiseLogistic`'s.
    """

    @staticmethod
    def forward(
        ctx: Any, u: Tensor, g: Tensor, factor: Tensor, pairs: Pairs
    ) -> tuple[Tensor, Tensor]:
        (weights, rows, sigma), (n_lists, length) = pairs, u.shape
        blocks = _row_blocks(u, rows, upper=True)
        largest = max((2 * (i1 - i0) * (length - i0 - 1) for i0, i1 in blocks), default=0)
        buffer = u.new_empty(n_lists * largest)
        # Sums over each item's pairs, without its own factor: [upper/lower, N, L, loss/slope].
        sums = u.new_zeros(2, n_lists, length, 2)
        for i0, i1 in blocks:
            c0, height, cols = i0 + 1, i1 - i0, length - i0 - 1
            # (g_j - g_i) times the position weight: its sign says which item should rank higher.
            weight = (g[:, None, c0:] - g[:, i0:i1, None]).mul_(
                pair_position_weights(weights, i0, i1, length)
            )
            terms = buffer[: n_lists * height * 2 * cols].view(n_lists, height, 2, cols)
            z = torch.sub(u[:, i0:i1, None], u[:, None, c0:], out=terms[:, :, 1])
            z.mul_(sigma).copysign_(weight)  # -sigma (u_w - u_l), as in PairwiseLogistic
            F.softplus(z, out=terms[:, :, 0])  # type: ignore[call-arg]
            z.sigmoid_()
            # Loss |weight| softplus(z); slope weight sigmoid(z) (the sign of g_j - g_i).
            terms.mul_(weight[:, :, None]).select(2, 0).abs_()
            del weight
            with full_precision(u.device):
                upper = torch.bmm(terms.view(n_lists, 2 * height, cols), factor[:, c0:, None])
                lower = torch.bmm(factor[:, None, i0:i1], terms.view(n_lists, height, 2 * cols))
            sums[0, :, i0:i1].add_(upper.view(n_lists, height, 2))
            sums[1, :, c0:].add_(lower.view(n_lists, 2, cols).transpose(1, 2))
            del terms, z
        shares = sums[0, ..., 0] + sums[1, ..., 0]
        with full_precision(u.device):
            loss = torch.bmm(factor[:, None, :], sums[0, ..., :1]).view(n_lists)
        grad = torch.sub(sums[0, ..., 1], sums[1, ..., 1]).mul_(factor).mul_(sigma)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(shares)
        return loss, shares


class SmoothRanks(torch.autograd.Function):
    r"""Sigmoid-smoothed ranks, blockwise.

    $\hat r_i = \frac12 + \sum_j v_j \sigma((s_j - s_i)/T)$.
    With ``v`` the real items (1, or ``None`` for all real) the self term $\sigma(0) = 1/2$
    turns this into $1 + \sum_{j \ne i} v_j \sigma((s_j - s_i)/T)$ for every real item.
    Score differences are taken before dividing by the temperature ``T``: ``s / T`` may
    overflow (then ``inf - inf`` is NaN), and rounding ``s / T`` before subtracting would make
    the result depend on the scores' offset, where ``(s_j - s_i) / T`` does neither.
    Backward recomputes the sigmoids blockwise:
    $\partial L / \partial s_m = (v_m (Q \bar g)_m - \bar g_m (Q v)_m) / T$ with
    $Q_{ij} = \sigma'((s_j - s_i)/T)$ (symmetric) and
    $\bar g = \partial L / \partial \hat r$.
    """

    @staticmethod
    def _above(s: Tensor, i0: int, i1: int, temperature: float) -> Tensor:
        r"""``[N, i1 - i0, L]``: $\sigma((s_j - s_i) / T)$ for rows ``i`` in ``[i0, i1)``.

        One new block, transformed in place.
        """
        gaps = s[:, None, :] - s[:, i0:i1, None]
        if temperature != 1:
            gaps.div_(temperature)
        return gaps.sigmoid_()

    @staticmethod
    def forward(ctx: Any, s: Tensor, valid: Tensor | None, temperature: float) -> Tensor:
        def block_ranks(i0: int, i1: int) -> Tensor:
            above = SmoothRanks._above(s, i0, i1, temperature)
            if valid is None:
                return above.sum(dim=-1)
            with full_precision(s.device):
                return torch.bmm(above, valid[:, :, None]).squeeze(-1)

        ctx.blocks = _row_blocks(
            s, s.shape[-1], accelerator=ACCELERATOR_SINGLE_TEMPORARY_BLOCK_ELEMENTS
        )
        ctx.save_for_backward(s, valid)
        ctx.temperature = temperature
        return _by_rows(s, ctx.blocks, block_ranks).add_(0.5)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_ranks: Tensor) -> tuple[Tensor | None, None, None]:
        u, valid = ctx.saved_tensors
        # Q v and Q g-bar, from one product with both as columns, or with v = 1 from row sums.
        columns = grad_ranks[:, :, None] if valid is None else torch.stack([grad_ranks, valid], -1)

        def block_grad(i0: int, i1: int) -> Tensor:
            slope = SmoothRanks._above(u, i0, i1, ctx.temperature)
            slope.addcmul_(slope, slope, value=-1.0)  # sigma' = sigma (1 - sigma)
            with full_precision(u.device):
                sums = torch.bmm(slope, columns)
            own: Tensor = grad_ranks[:, i0:i1]
            if valid is None:
                return sums[..., 0] - own * slope.sum(dim=-1)
            grad: Tensor = valid[:, i0:i1] * sums[..., 0] - own * sums[..., 1]
            return grad

        grad = _by_rows(u, ctx.blocks, block_grad)
        return (grad if ctx.temperature == 1 else grad.div_(ctx.temperature)), None, None
