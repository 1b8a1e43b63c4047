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
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from torch_ndcg import _pairwise
from torch_ndcg._host import full_precision

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
    count = (
        torch.full_like(below[:, :1], values.shape[-1])
        if real is None
        else real.sum(dim=-1, keepdim=True)
    )
    above = count - upto
    total = prefix[:, -1:]
    return values * (below - above) - prefix.gather(-1, below) + (total - prefix.gather(-1, upto))


def _reciprocal(values: Tensor) -> Tensor:
    """``1 / values``, with 0 (an empty row or column) giving the largest finite reciprocal."""
    return 1 / values.clamp(min=torch.finfo(values.dtype).tiny)


def _reciprocal_backward(out: Tensor, grad: Tensor) -> Tensor:
    """Gradient through `_reciprocal` given its output: ``-grad out^2`` (0 where clamped)."""
    clamped = out >= 1 / torch.finfo(out.dtype).tiny
    return torch.where(clamped, 0, -grad * out * out)


class _Kernel:
    r"""The kernel $K_{ij} = e^{a_{ij} - m_i}$ of a batch, whole or by blocks of rows.

    ``x`` = s / T, ``y`` = A / T, ``coef`` = n + 1 - 2i (positions), ``rows`` / ``cols`` the
    valid positions / real items (bool, or ``None`` for all). ``m`` is each row's largest
    logit, found by `start`.
    """

    def __init__(
        self, x: Tensor, y: Tensor, coef: Tensor, rows: Tensor | None, cols: Tensor | None
    ) -> None:
        self.x, self.y, self.coef, self.rows, self.cols = x, y, coef, rows, cols
        n_lists, length = x.shape
        self.row_max = torch.zeros_like(x)
        self.whole: Tensor | None = None
        self.blocks = list(
            _pairwise._row_blocks(n_lists, length, length, upper=False, device=x.device)
        )
        self.cached = n_lists * length * length * x.element_size() <= CACHE_BYTES

    def _logits(self, i0: int, i1: int) -> tuple[Tensor, Tensor | None]:
        logits = self.coef[:, i0:i1, None] * self.x[:, None, :] - self.y[:, None, :]
        valid = None
        if self.rows is not None and self.cols is not None:
            valid = self.rows[:, i0:i1, None] & self.cols[:, None, :]
        return logits, valid

    def _block(self, i0: int, i1: int) -> Tensor:
        logits, valid = self._logits(i0, i1)
        shifted = logits.sub_(self.row_max[:, i0:i1, None])
        # Entries below the smallest normal float are set to 0: an exponential or a product
        # that underflows into subnormals runs an order of magnitude slower on CPUs.
        tiny = torch.finfo(shifted.dtype).tiny
        floor = math.log(tiny)
        if valid is not None:
            shifted = torch.where(valid, shifted, floor)
        return torch.threshold_(shifted.clamp_(min=floor).exp_(), 2 * tiny, 0.0)

    def start(self) -> Tensor:
        """Find the row maxima (and keep ``K`` if cached); return the row sums of ``K``."""
        sums = torch.zeros_like(self.x)
        if self.cached:
            n_lists, length = self.x.shape
            self.whole = self.x.new_empty(n_lists, length, length)
        for i0, i1 in self.blocks:
            logits, valid = self._logits(i0, i1)
            if valid is not None:
                logits = torch.where(valid, logits, -torch.inf)
            top = logits.amax(dim=-1)
            self.row_max[:, i0:i1] = torch.where(top.isfinite(), top, 0)
            block = self._block(i0, i1)
            sums[:, i0:i1] = block.sum(dim=-1)
            if self.whole is not None:
                self.whole[:, i0:i1] = block
        return sums

    def _each(self) -> Iterator[tuple[int, int, Tensor]]:
        if self.whole is not None:
            yield 0, self.whole.shape[1], self.whole
            return
        for i0, i1 in self.blocks:
            yield i0, i1, self._block(i0, i1)

    def times(self, vectors: Tensor) -> Tensor:
        """$K v$ for ``[N, L, R]`` ``vectors``: ``[N, L, R]``."""
        if self.whole is not None:
            with full_precision(vectors.device):
                return torch.bmm(self.whole, vectors)
        out = vectors.new_empty(vectors.shape)
        with full_precision(vectors.device):
            for i0, i1, block in self._each():
                out[:, i0:i1] = torch.bmm(block, vectors)
        return out

    def transposed_times(self, vectors: Tensor) -> Tensor:
        r"""$K^\top v$ for ``[N, L, R]`` ``vectors``: ``[N, L, R]``."""
        # (v^T K)^T: the kernel read row by row, as it is stored.
        if self.whole is not None:
            with full_precision(vectors.device):
                return torch.bmm(vectors.transpose(1, 2), self.whole).transpose(1, 2)
        out = vectors.new_zeros(vectors.shape[0], vectors.shape[2], vectors.shape[1])
        with full_precision(vectors.device):
            for i0, i1, block in self._each():
                out.baddbmm_(vectors[:, i0:i1].transpose(1, 2), block)
        return out.transpose(1, 2)


def _products(kernel: _Kernel) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]:
    r"""$v \mapsto K v$ and $v \mapsto K^\top v$ for ``[N, L]`` vectors ``v``.

    From the kept kernel, one batched product each (called inside `full_precision`); else
    through the kernel's blocks.
    """
    whole = kernel.whole
    if whole is None:
        return (
            lambda v: kernel.times(v[:, :, None])[..., 0],
            lambda v: kernel.transposed_times(v[:, :, None])[..., 0],
        )
    # K^T v as (v^T K)^T: the kernel read row by row, as it is stored. The row vector v^T is
    # the column v transposed (strides as `_Kernel.transposed_times` gives them): written as
    # ``v.unsqueeze(1)`` it takes a slower product on the CPU (about 6% of a step of 256 x 100).
    return (
        lambda v: torch.bmm(whole, v.unsqueeze(2)).squeeze(2),
        lambda v: torch.bmm(v.unsqueeze(2).mT, whole).squeeze(1),
    )


class NeuralSortSinkhorn(torch.autograd.Function):
    r"""Per list $\sum_{ij} d_i P_{ij} g_j$, ``P`` the Sinkhorn-scaled NeuralSort matrix.

    Inputs: ``x`` = scores / T and ``y`` = $A$ / T (differentiable), ``coef`` the
    position coefficients $n + 1 - 2i$ (0 on rows past the list's real items), ``rows`` /
    ``cols`` the valid positions / real items (``None``: all), ``g`` the gains (divided by the
    ideal DCG), ``d`` the ``[L]`` discounts of positions (0 past the cut-off), ``max_iter``,
    ``tol``. Sinkhorn scaling follows allRank: a column then a row normalisation per iteration,
    then a stop once every column of every list sums to 1 within ``tol`` (the rows do by
    construction). The stop is decided on the device, without a read-back: iterations after it
    leave the scaling vectors as they are, so all ``max_iter`` products always run.
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        y: Tensor,
        coef: Tensor,
        rows: Tensor | None,
        cols: Tensor | None,
        g: Tensor,
        d: Tensor,
        max_iter: int,
        tol: float,
    ) -> Tensor:
        kernel = _Kernel(x, y, coef, rows, cols)
        col_ones = torch.ones_like(x) if cols is None else cols.to(x.dtype)
        times, transposed_times = _products(kernel)
        r = _reciprocal(kernel.start())
        if rows is not None:
            r = torch.where(rows, r, 0)
        c = col_ones
        saved_r, saved_c, saved_frozen = [r], [c], []
        done = torch.zeros((), dtype=torch.bool, device=x.device)
        # The products' precision is switched once, around all the iterations.
        with full_precision(x.device):
            column_sums = transposed_times(r)
            for _ in range(max_iter):
                new_c = _reciprocal(column_sums)
                if cols is not None:
                    new_c.mul_(col_ones)
                new_r = _reciprocal(times(new_c))
                if rows is not None:
                    new_r = torch.where(rows, new_r, 0)
                next_sums = transposed_times(new_r)
                saved_frozen.append(done)
                c = torch.where(done, c, new_c)
                r = torch.where(done, r, new_r)
                column_sums = torch.where(done, column_sums, next_sums)
                saved_r.append(r)
                saved_c.append(c)
                # |column sum - 1| of the real items (c is 0 elsewhere: |0 - 1| * 0).
                gap = (c * column_sums).sub_(1).abs_()
                if cols is not None:
                    gap.mul_(col_ones)
                if gap.numel() > 0:
                    done = done | (gap.amax() < tol)
            value = (d * r * times(c * g)).sum(dim=-1)
        ctx.kernel = kernel
        ctx.save_for_backward(g, d, col_ones, *saved_r, *saved_c, *saved_frozen)
        ctx.max_iter = max_iter
        return value

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_value: Tensor) -> tuple[Tensor | None, ...]:
        kernel: _Kernel = ctx.kernel
        steps = ctx.max_iter
        g, d, col_ones, *rest = ctx.saved_tensors
        apply, apply_t = _products(kernel)
        with full_precision(grad_value.device):
            return NeuralSortSinkhorn._backward(
                kernel, steps, g, d, col_ones, rest, grad_value, apply, apply_t
            )

    @staticmethod
    def _backward(
        kernel: _Kernel,
        steps: int,
        g: Tensor,
        d: Tensor,
        col_ones: Tensor,
        rest: list[Tensor],
        grad_value: Tensor,
        apply: Callable[[Tensor], Tensor],
        apply_t: Callable[[Tensor], Tensor],
    ) -> tuple[Tensor | None, ...]:
        saved_r = rest[: steps + 1]
        saved_c = rest[steps + 1 : 2 * steps + 2]
        saved_frozen = rest[2 * steps + 2 :]
        # K-bar = sum of outer products left[:, :, q] right[:, :, q]^T.
        zero = g.new_zeros(())
        left: list[Tensor] = []
        right: list[Tensor] = []
        scale = grad_value[:, None]
        r, c = saved_r[-1], saved_c[-1]
        row_weights = scale * d * r
        col_weights = c * g
        grad_r = scale * d * apply(col_weights)
        grad_c = g * apply_t(row_weights)
        left.append(row_weights)
        right.append(col_weights)
        for t in range(steps, 0, -1):
            frozen = saved_frozen[t - 1]
            r, c, previous_r = saved_r[t], saved_c[t], saved_r[t - 1]
            # r = 1 / (K c): its gradient reaches c and K.
            grad_rho = torch.where(frozen, zero, _reciprocal_backward(r, grad_r))
            grad_new_c = torch.where(frozen, zero, apply_t(grad_rho) + grad_c)
            left.append(grad_rho)
            right.append(c)
            # c = 1 / (K^T r_prev): its gradient reaches r_prev and K.
            grad_sigma = _reciprocal_backward(c, grad_new_c)
            if kernel.cols is not None:
                grad_sigma.mul_(col_ones)
            grad_r = apply(grad_sigma) + torch.where(frozen, grad_r, zero)
            grad_c = torch.where(frozen, grad_c, zero)
            left.append(previous_r)
            right.append(grad_sigma)
        # r_0 = 1 / (K 1): the row softmax.
        left.append(_reciprocal_backward(saved_r[0], grad_r))
        right.append(col_ones)
        # dK/da = K (row maxima are constants: every row scaling is undone by the next row
        # step), a_ij = coef_i x_j - y_j.
        lefts = torch.stack(left, dim=-1)
        rights = torch.stack(right, dim=-1)
        both = kernel.transposed_times(torch.cat([kernel.coef[:, :, None] * lefts, lefts], -1))
        n_pairs = lefts.shape[-1]
        grad_x = (both[..., :n_pairs] * rights).sum(dim=-1)
        grad_y = -(both[..., n_pairs:] * rights).sum(dim=-1)
        return grad_x, grad_y, None, None, None, None, None, None, None
