r"""NeuralSort relaxed permutations made doubly stochastic by Sinkhorn scaling, for NeuralNDCG.

For a list of ``n`` real items with scores $s$, deterministic NeuralSort (Grover et al.
2019) relaxes the sorting permutation to the row-stochastic matrix

$$
\hat P_{ij} = \operatorname{softmax}_j\bigl(a_{ij}\bigr), \qquad
a_{ij} = \bigl((n + 1 - 2i) \, s_j - \textstyle\sum_k |s_j - s_k|\bigr) / T,
$$

rows $i = 1..n$ being rank positions and columns the items. Sinkhorn scaling then
alternates column and row normalisation. Every matrix met on the way is
$\operatorname{diag}(r) \, K \operatorname{diag}(c)$ with the fixed kernel
$K_{ij} = e^{a_{ij} - \max_j a_{ij}}$, so only the scaling vectors $r, c$ change:
a column step is $c = 1 / (K^\top r)$, a row step $r = 1 / (K c)$, both matrix-vector
products. NeuralNDCG needs the matrix only through
$\sum_{ij} d_i \hat P_{ij} g_j = (d \odot r)^\top K (c \odot g)$.

`NeuralSortSinkhorn` keeps ``K`` whole while it takes at most `CACHE_BYTES`
(1 GiB), and otherwise recomputes it in blocks of rows for every product (memory ``O(B L)``
plus a block, whatever the list length). Its backward runs the iterations in
reverse from the stored scaling vectors (``O(max_iter B L)``): the gradient with respect to
$K$ is a sum of ``2 max_iter + 2`` outer products, contracted with ``K`` in one pass.

Everything here assumes validated, float32 or float64, ``[N, L]`` input; no checks.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from torch_ndcg import _pairwise
from torch_ndcg._kernels import full_precision

# Bytes of kernel (B * L * L entries) kept in memory between the Sinkhorn products: 1 GiB, that
# is 4 lists of 8,192 items in float32. Above it the kernel is recomputed in blocks of rows for
# every product (4 max_iter + 2 times): memory O(B L) plus a block, but on a CPU about 25 times
# slower than products with the kept kernel. Tests lower it.
CACHE_BYTES = 1 << 30


def absolute_gap_sums(scores: Tensor, real: Tensor | None, dtype: torch.dtype) -> Tensor:
    r"""$A_j = \sum_{k \text{ real}} |s_j - s_k|$ for every item, in ``O(L \log L)``.

    From the real scores sorted ascending: with $n^<_j$ ($n^>_j$) the real scores
    strictly below (above) $s_j$ and $S^<_j$, $S^>_j$ their sums,
    $A_j = s_j (n^<_j - n^>_j) - S^<_j + S^>_j$. Differentiable, with the gradient of
    $|\cdot|$ (0 at a tie). Sums are taken in ``dtype``; padded items get garbage.
    """
    values = scores.to(dtype)
    keys = values.detach() if real is None else torch.where(real, values.detach(), torch.inf)
    sorted_keys, order = keys.sort(dim=-1)
    sorted_values = values.gather(-1, order)
    if real is not None:
        sorted_values = torch.where(real.gather(-1, order), sorted_values, 0)
    prefix = torch.nn.functional.pad(sorted_values.cumsum(dim=-1), (1, 0))
    probe = values.detach().contiguous()
    below = torch.searchsorted(sorted_keys, probe, right=False)
    upto = torch.searchsorted(sorted_keys, probe, right=True)
    count = values.shape[-1] if real is None else real.sum(dim=-1, keepdim=True)
    above = torch.rsub(upto, count)  # (count - upto without Tensor.__rsub__'s Python)
    total = prefix[:, -1:]
    return values * (below - above) - prefix.gather(-1, below) + (total - prefix.gather(-1, upto))


# The backward is linear in the incoming gradient: each list's is scaled by a power of 2 (exact)
# to about 2^GRADIENT_EXPONENT, and the result back. Its vectors shrink along the reverse
# iterations; unscaled, their products with the smallest kernel entries fall into subnormal
# floats, an order of magnitude slower on CPUs (most of a step at 256 x 100).
GRADIENT_EXPONENT = 40
# (integer type of the same width, mantissa bits, exponent bias) of the compute dtypes.
_FLOAT_BITS = {torch.float32: (torch.int32, 23, 127), torch.float64: (torch.int64, 52, 1023)}


def _gradient_scale(grad: Tensor, gains: Tensor) -> tuple[Tensor, Tensor]:
    """Powers of 2 that bring ``grad`` times its list's largest gain to about 2^40, and inverses.

    2^40 is ``2^GRADIENT_EXPONENT``. With the gains in the scale, weighted gains (``weight``
    may make them 1e30 in float32) leave the backward's vectors as much room below overflow
    as gains of about 1 do.
    """
    integer, mantissa_bits, bias = _FLOAT_BITS[grad.dtype]
    # The biased exponent of 2^(GRADIENT_EXPONENT - e), e that of grad times the largest gain
    # (exponents added: no product to overflow), kept normal both ways.
    exponent = torch.frexp(grad).exponent + torch.frexp(gains.abs().amax(dim=-1)).exponent
    biased = (GRADIENT_EXPONENT + bias - exponent).clamp_(2, 2 * bias - 2)
    scale = (biased.to(integer) << mantissa_bits).view(grad.dtype)
    return scale, scale.reciprocal()


class _Kernel:
    r"""The kernel $K_{ij} = e^{a_{ij} - m_i}$ of a batch, whole or by blocks of rows.

    ``x`` = s / T, ``y`` = A / T, ``coef`` = n + 1 - 2i (positions), ``rows`` / ``cols`` the
    valid positions / real items (bool, or ``None`` for all). ``m`` is each row's largest
    logit. Made, it holds ``row_sums``, the row sums of ``K``, and keeps ``K`` whole
    (``whole``) while it takes at most `CACHE_BYTES`. Its rows are made block by block, each
    block's logits once for their maxima and ``K``; one block is kept as made, nothing copied.
    """

    def __init__(
        self, x: Tensor, y: Tensor, coef: Tensor, rows: Tensor | None, cols: Tensor | None
    ) -> None:
        self.x, self.y, self.coef, self.rows, self.cols = x, y, coef, rows, cols
        n_lists, length = x.shape
        self.blocks = _pairwise._row_blocks(x, length)
        cached = n_lists * length * length * x.element_size() <= CACHE_BYTES
        several = len(self.blocks) > 1
        self.whole = x.new_empty(n_lists, length, length) if cached and several else None
        # Row maxima and sums written in place (a list of small tensors between the blocks
        # would fragment the heap); one block's are kept as made, like its kernel.
        self.row_max, self.row_sums = (
            (x.new_empty(x.shape), x.new_empty(x.shape)) if several else (x, x)
        )
        for i0, i1 in self.blocks:
            logits = self._logits(i0, i1)
            top = logits.amax(dim=-1).nan_to_num_(0.0, 0.0, 0.0)  # 0 for a row of none
            block = self._block(i0, i1, logits, top)
            if not several:
                self.row_max, self.row_sums = top, block.sum(dim=-1)
                self.whole = block if cached else None
                break
            self.row_max[:, i0:i1], self.row_sums[:, i0:i1] = top, block.sum(dim=-1)
            if self.whole is not None:
                self.whole[:, i0:i1] = block

    def _logits(self, i0: int, i1: int) -> Tensor:
        """Rows ``[i0, i1)`` of the logits, ``-inf`` outside the valid pairs (a new tensor)."""
        logits = self.coef[:, i0:i1, None] * self.x[:, None, :] - self.y[:, None, :]
        if self.rows is None or self.cols is None:
            return logits
        valid = self.rows[:, i0:i1, None] & self.cols[:, None, :]
        return torch.where(valid, logits, -torch.inf)

    def _block(
        self, i0: int, i1: int, logits: Tensor | None = None, top: Tensor | None = None
    ) -> Tensor:
        """Rows ``[i0, i1)`` of ``K``, from their `_logits` and largest logits (``row_max``).

        ``logits`` (overwritten) and ``top``, where the caller has them: not made again.
        """
        logits = self._logits(i0, i1) if logits is None else logits
        top = self.row_max[:, i0:i1] if top is None else top
        shifted = logits.sub_(top[:, :, None])
        # Entries below the smallest normal float (those outside the valid pairs too) are set
        # to 0: an exponential or a product that underflows into subnormals runs an order of
        # magnitude slower on CPUs.
        tiny = torch.finfo(shifted.dtype).tiny
        return torch.threshold_(shifted.clamp_(min=math.log(tiny)).exp_(), 2 * tiny, 0.0)

    def times(self, v: Tensor, add: Tensor | None = None, *, transposed: bool = False) -> Tensor:
        r"""$v K + a$, or $v K^\top + a$ (``transposed``), for ``[N, R, L]`` rows ``v``.

        ``add`` (``None``: nothing added) has the shape of ``v``. From the kept kernel, one
        batched product; else through the kernel's blocks, made again. On a CPU a row vector
        times ``K`` or ``K^T`` is about twice as fast as ``K`` times a column at 256 x 100.
        Called inside `full_precision`.
        """
        if self.whole is not None:
            kernel = self.whole.mT if transposed else self.whole
            return torch.bmm(v, kernel) if add is None else torch.baddbmm(add, v, kernel)
        out = v.new_empty(v.mT.shape) if transposed else v.new_zeros(v.shape)
        for i0, i1 in self.blocks:
            block = self._block(i0, i1)
            if transposed:  # K v^T, by rows
                out[:, i0:i1] = torch.bmm(block, v.mT)
            else:  # v K, the kernel read row by row, as it is made
                out.baddbmm_(v[:, :, i0:i1], block)
        out = out.mT if transposed else out
        return out if add is None else out.add_(add)


class NeuralSortSinkhorn(torch.autograd.Function):
    r"""Per list $\sum_{ij} d_i P_{ij} g_j$, ``P`` the Sinkhorn-scaled NeuralSort matrix.

    Inputs: ``x`` = scores / T and ``y`` = $A$ / T (differentiable), ``coef`` the
    position coefficients $n + 1 - 2i$ (0 on rows past the list's real items), ``rows`` /
    ``cols`` the valid positions / real items (``None``: all), ``g`` the gains (divided by the
    ideal DCG), ``d`` the ``[L]`` discounts of positions (0 past the cut-off), ``max_iter``,
    ``tol``. Sinkhorn scaling follows allRank: a column then a row normalisation per iteration,
    then a stop once every column of every list sums to 1 within ``tol`` (the rows do by
    construction). The stop is decided on the device, without a read-back: all ``max_iter``
    iterations run, their column sums are checked together afterwards, and the scaling vectors
    of the first iteration that met the tolerance are picked (an index, never a product with 0:
    later iterations may have drifted). That gather right-aligns the iterations up to the stop
    (zeros before the first), so the backward runs ``max_iter`` reverse steps with no masks:
    steps before the first iteration carry zeros.

    Vectors are rows ``[N, 1, L]``, as the batched products take them (`_Kernel.times`); the
    iterations' ``r`` and ``c`` are kept ``[N, 2, max_iter + 1, L]``.
    """

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, y: Tensor, terms: tuple[Tensor, Tensor | None, Tensor | None],
        weights: tuple[Tensor, Tensor], stop: tuple[int, float],
    ) -> Tensor:
        (coef, rows, cols), (g, d), (max_iter, tol) = terms, weights, stop
        kernel = _Kernel(x, y, coef, rows, cols)
        n_lists, length = x.shape
        tiny = torch.finfo(x.dtype).tiny
        row_mask = None if rows is None else rows.to(x.dtype)[:, None, :]
        col_ones = x.new_ones(n_lists, 1, length) if cols is None else cols.to(x.dtype)[:, None, :]

        def scaling(sums: Tensor, mask: Tensor | None) -> Tensor:
            """``1 / sums`` (an empty row or column: the largest finite), 0 outside ``mask``."""
            reciprocal = sums.clamp_min(tiny).reciprocal_()
            return reciprocal if mask is None else reciprocal.mul_(mask)

        r = scaling(kernel.row_sums[:, None, :], row_mask)  # 0 past the real rows
        scalings, columns, sums = [r], [col_ones], []
        # The products' precision is switched once, around all the iterations.
        with full_precision(x.device):
            for _ in range(max_iter):
                sums.append(kernel.times(r))
                c = scaling(sums[-1], None if cols is None else col_ones)
                r = scaling(kernel.times(c, transposed=True), row_mask)
                scalings.append(r)
                columns.append(c)
            # 0, r_0..r_T, then 0, c_0 (ones) .. c_T: [N, 2 (T + 2), L].
            zeros = torch.zeros_like(col_ones)
            stacked = torch.cat([zeros, *scalings, zeros, *columns], dim=1)
            del scalings, columns
            steps = torch.arange(max_iter + 1, device=x.device)
            if max_iter > 0 and n_lists * length > 0:
                # Iteration t (1..T) met the tolerance if every |c_t (K^T r_t) - 1| of a real
                # item is below it (c is 0 elsewhere: |0 - 1| * 0).
                sums.append(kernel.times(r))
                gaps = (stacked[:, max_iter + 4 :] * torch.cat(sums[1:], dim=1)).sub_(1).abs_()
                if cols is not None:
                    gaps.mul_(col_ones)
                met = gaps.amax(dim=(0, 2)) < tol
                last = torch.where(met, steps[1:], max_iter).amin()
            else:
                last = steps[-1]
            # The iterations up to the stop, right-aligned: position k holds iteration
            # k - (T - last), zeros (index 0) before iteration 0.
            aligned = stacked.view(n_lists, 2, max_iter + 2, length).index_select(
                2, (steps + last).sub_(max_iter - 1).clamp_(min=0)
            )
            r, c = aligned[:, 0, max_iter:], aligned[:, 1, max_iter:]
            col_weights = c * g[:, None, :]
            row_weights = r * d
            kept_product = kernel.times(col_weights, transposed=True)  # (K (c g))^T
            value = torch.bmm(row_weights, kept_product.mT).view(n_lists)
        ctx.kernel = kernel
        ctx.save_for_backward(g, d, aligned, steps, last, row_weights, col_weights, kept_product)
        ctx.max_iter = max_iter
        return value

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_value: Tensor) -> tuple[Tensor | None, ...]:
        g, d, aligned, steps, last, row_weights, col_weights, kept_product = ctx.saved_tensors
        kernel, max_iter = ctx.kernel, ctx.max_iter
        with full_precision(grad_value.device):
            n_lists, length = g.shape
            scale, unscale = _gradient_scale(grad_value, g)
            grad_value = (grad_value * scale)[:, None, None]
            # The iterations run in reverse from position T (the stop) down; positions before
            # iteration 0 hold zeros. Through r = 1 / u (clamped at the largest finite r) the
            # gradient is -grad r^2, 0 where clamped: the factors -r^2 (or 0) of every iteration
            # are worked out at once. c_0 (ones) is a constant: its factor is 0. (Squares stay
            # far from overflowing: every row of K holds a 1, and NeuralSort's row i peaks at the
            # i-th largest score, so every column of distinct scores does too; the clamp keeps a
            # degenerate one finite.)
            factors = aligned.square().clamp_(max=torch.finfo(g.dtype).max).neg_()
            factors.masked_fill_(aligned >= 1 / torch.finfo(g.dtype).tiny, 0)
            factors[:, 1].masked_fill_((steps < max_iter - last + 1)[:, None], 0)
            factor_r = factors[:, 0].unsqueeze(2).unbind(1)
            factor_c = factors[:, 1].unsqueeze(2).unbind(1)
            # The value is sum_i d_i r_i (K (c g))_i of the picked r, c.
            row_weights = row_weights * grad_value
            grad_r = kept_product * d * grad_value
            grad_c: Tensor | None = kernel.times(row_weights).mul_(g[:, None, :])
            rhos: list[Tensor] = []
            sigmas: list[Tensor] = []
            for k in range(max_iter, 0, -1):
                # r = 1 / (K c): its gradient reaches c and K.
                rho = grad_r * factor_r[k]
                # c = 1 / (K^T r_before): its gradient reaches r_before and K.
                sigma = kernel.times(rho, grad_c).mul_(factor_c[k])
                grad_r = kernel.times(sigma, transposed=True)
                grad_c = None
                rhos.append(rho)
                sigmas.append(sigma)
            # r_0 = 1 / (K 1): the row softmax.
            rhos.append(grad_r * factor_r[0])
            # K-bar = sum over q of the outer products lefts[:, q]^T rights[:, q]. (Each
            # `max_iter` vectors freed once copied: the peak memory is in what follows.)
            del factors, factor_r, factor_c
            lefts = torch.cat([row_weights, *reversed(rhos), aligned[:, 0, :max_iter]], dim=1)
            del rhos
            rights = torch.cat([col_weights, aligned[:, 1], *reversed(sigmas)], dim=1)
            del sigmas
            # dK/da = K (row maxima are constants: every row scaling is undone by the next row
            # step), a_ij = coef_i x_j - y_j.
            pairs = lefts.shape[1]
            pulled = torch.cat([lefts * kernel.coef[:, None, :], lefts], dim=1)
            del lefts
            both = kernel.times(pulled)
            del pulled
            grads = (both.view(n_lists, 2, pairs, length) * rights[:, None]).sum(dim=2)
            grads.mul_(unscale[:, None, None])
            return grads[:, 0], grads[:, 1].neg(), None, None, None
