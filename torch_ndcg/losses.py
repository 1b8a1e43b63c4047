"""Ranking losses as ``nn.Module``: they store hyper-parameters and call the functional losses."""

from __future__ import annotations

from typing import NoReturn

from torch import Tensor, nn

from torch_ndcg._options import Discount, Gain, Reduction, Weighting
from torch_ndcg._validation import (
    APPROX_PORTED_NAMES,
    LAMBDARANK_PORTED_NAMES,
    NEURAL_PORTED_NAMES,
    check_approx_options,
    check_bool,
    check_ignore_index,
    check_lambdarank_options,
    check_neural_options,
    check_options,
    reject_ported_names,
)
from torch_ndcg.functional import approx_ndcg_loss, lambdarank_loss, neural_ndcg_loss

__all__ = ["ApproxNDCGLoss", "LambdaRankLoss", "NeuralNDCGLoss"]


class _RankingLoss(nn.Module):
    """The options both losses share: checked once here, kept for ``forward``."""

    def __init__(
        self,
        *,
        gain: Gain,
        discount: Discount,
        reduction: Reduction,
        ignore_index: int | None,
        validate_args: bool,
    ) -> None:
        super().__init__()
        check_options(gain, discount)
        check_ignore_index(ignore_index)
        check_bool("validate_args", validate_args)
        self.gain: Gain = gain
        self.discount: Discount = discount
        self.reduction: Reduction = reduction
        self.ignore_index = ignore_index
        self.validate_args = validate_args


class LambdaRankLoss(_RankingLoss):
    r"""LambdaLoss with LambdaRank, NDCG-Loss2 or NDCG-Loss2++ weights; see `lambdarank_loss`.

    $$
    \ell = \sum_{G_w > G_l} \omega_{wl} \, \log\bigl(1 + e^{-\sigma (s_w - s_l)}\bigr),
    \qquad \omega^{\mathrm{lambdarank}}_{wl} = |\Delta \mathrm{nDCG@}k_{wl}|
    $$

    Hyper-parameters are checked here, once; ``forward`` checks the tensors.

    Args:
        k: truncation level (pairs with an item in the current top k), or ``None``.
        sigma: positive slope of the logistic loss.
        weighting: ``"lambdarank"``, ``"ndcg2"`` or ``"ndcg2pp"``.
        mu: non-negative weight of the NDCG-Loss2 term in ``"ndcg2pp"``.
        gain: ``"exponential"``, ``"linear"`` or a callable.
        discount: ``"log2"``, ``"jarvelin"`` or a callable.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        ignore_index: label value that marks padded items.
        validate_args: check the tensors at every call.
        **ported_names: none is taken; a name from allRank or TF-Ranking (``weighing_scheme``,
            ``padded_value_indicator``, ``alpha``, ...) raises ``TypeError`` naming ours.

    Example:
        >>> import torch
        >>> from torch_ndcg import LambdaRankLoss

        One pair (the last two items are padding), weight $1 - 1/\log_2 3$, loss
        $(1 - 1/\log_2 3) \log(1 + e) = 0.4847$; the gradient is
        $\mp (1 - 1/\log_2 3) \operatorname{sigmoid}(1) = \mp 0.2698$.

        >>> loss_fn = LambdaRankLoss(ignore_index=-1)
        >>> preds = torch.tensor([[1.0, 2.0, 0.0, -1.0]], requires_grad=True)
        >>> target = torch.tensor([[1, 0, -1, -1]])
        >>> loss = loss_fn(preds, target)
        >>> round(loss.item(), 4)
        0.4847
        >>> loss.backward()
        >>> preds.grad
        tensor([[-0.2698,  0.2698,  0.0000,  0.0000]])
    """

    def __init__(
        self,
        *,
        k: int | None = None,
        sigma: float = 1.0,
        weighting: Weighting = "lambdarank",
        mu: float = 10.0,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
        **ported_names: NoReturn,
    ) -> None:
        reject_ported_names("LambdaRankLoss", ported_names, LAMBDARANK_PORTED_NAMES)
        check_lambdarank_options(k=k, sigma=sigma, weighting=weighting, mu=mu, reduction=reduction)
        super().__init__(
            gain=gain,
            discount=discount,
            reduction=reduction,
            ignore_index=ignore_index,
            validate_args=validate_args,
        )
        self.k = k
        self.sigma = sigma
        self.weighting: Weighting = weighting
        self.mu = mu

    def forward(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) scales each item's gain, for example
        ``1 / propensity`` on clicks (inverse-propensity weighting).
        """
        return lambdarank_loss(
            preds,
            target,
            k=self.k,
            sigma=self.sigma,
            weighting=self.weighting,
            mu=self.mu,
            gain=self.gain,
            discount=self.discount,
            reduction=self.reduction,
            mask=mask,
            ignore_index=self.ignore_index,
            validate_args=self.validate_args,
            weight=weight,
        )

    def extra_repr(self) -> str:
        """Hyper-parameters shown by ``repr``."""
        return f"k={self.k}, sigma={self.sigma}, weighting={self.weighting!r}, mu={self.mu}"


class ApproxNDCGLoss(_RankingLoss):
    r"""One minus the sigmoid-smoothed nDCG@k of Qin, Liu & Li (2010); see `approx_ndcg_loss`.

    $$
    \hat r_i = 1 + \sum_{j \ne i} \operatorname{sigmoid}\Bigl(\frac{s_j - s_i}{T}\Bigr),
    \qquad \ell = 1 - \frac{1}{Z} \sum_i G_i \, D(\hat r_i)
    $$

    Args:
        temperature: positive temperature $T$ (default 1).
        k: smooth cut-off, or ``None`` for the whole list.
        gain: ``"exponential"``, ``"linear"`` or a callable.
        discount: ``"log2"``, ``"jarvelin"`` or a callable.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        ignore_index: label value that marks padded items.
        validate_args: check the tensors at every call.
        **ported_names: none is taken; a name from allRank or TF-Ranking (``weighing_scheme``,
            ``padded_value_indicator``, ``alpha``, ...) raises ``TypeError`` naming ours.

    Example:
        >>> import torch
        >>> from torch_ndcg import ApproxNDCGLoss
        >>> loss_fn = ApproxNDCGLoss(temperature=0.01)
        >>> preds = torch.tensor([[0.0, 1.0, 2.0]])
        >>> target = torch.tensor([[2, 1, 0]])
        >>> loss_fn(preds, target)  # 1 - (3/log2(4) + 1/log2(3)) / (3 + 1/log2(3))
        tensor(0.4131)
    """

    def __init__(
        self,
        *,
        temperature: float = 1.0,
        k: int | None = None,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
        **ported_names: NoReturn,
    ) -> None:
        reject_ported_names("ApproxNDCGLoss", ported_names, APPROX_PORTED_NAMES)
        check_approx_options(k=k, temperature=temperature, reduction=reduction)
        super().__init__(
            gain=gain,
            discount=discount,
            reduction=reduction,
            ignore_index=ignore_index,
            validate_args=validate_args,
        )
        self.temperature = temperature
        self.k = k

    def forward(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) scales each item's gain, for example
        ``1 / propensity`` on clicks (inverse-propensity weighting).
        """
        return approx_ndcg_loss(
            preds,
            target,
            temperature=self.temperature,
            k=self.k,
            gain=self.gain,
            discount=self.discount,
            reduction=self.reduction,
            mask=mask,
            ignore_index=self.ignore_index,
            validate_args=self.validate_args,
            weight=weight,
        )

    def extra_repr(self) -> str:
        """Hyper-parameters shown by ``repr``."""
        return f"temperature={self.temperature}, k={self.k}"


class NeuralNDCGLoss(_RankingLoss):
    r"""One minus nDCG@k of a NeuralSort + Sinkhorn relaxed sort; see `neural_ndcg_loss`.

    $$
    \hat P_{ij} = \operatorname{softmax}_j\Bigl(
        \frac{(n + 1 - 2i) \, s_j - \sum_k |s_j - s_k|}{T}\Bigr),
    \qquad \ell = 1 - \frac{1}{Z} \sum_{i \le k} D(i) \sum_j
        \operatorname{Sinkhorn}(\hat P)_{ij} \, G_j
    $$

    Args:
        temperature: positive NeuralSort temperature $T$ (default 1).
        k: cut-off, or ``None`` for the whole list.
        max_iter: most Sinkhorn iterations (default 50, as allRank).
        tol: Sinkhorn tolerance on the column sums (default 1e-6, as allRank).
        gain: ``"exponential"``, ``"linear"`` or a callable.
        discount: ``"log2"``, ``"jarvelin"`` or a callable.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        ignore_index: label value that marks padded items.
        validate_args: check the tensors at every call.
        **ported_names: none is taken; a name from allRank (``padded_value_indicator``,
            ``powered_relevancies``, ...) raises ``TypeError`` naming ours.

    Example:
        >>> import torch
        >>> from torch_ndcg import NeuralNDCGLoss
        >>> loss_fn = NeuralNDCGLoss(temperature=0.01)
        >>> preds = torch.tensor([[0.0, 1.0, 2.0]])
        >>> target = torch.tensor([[2, 1, 0]])
        >>> loss_fn(preds, target)  # 1 - (3/log2(4) + 1/log2(3)) / (3 + 1/log2(3))
        tensor(0.4131)
    """

    def __init__(
        self,
        *,
        temperature: float = 1.0,
        k: int | None = None,
        max_iter: int = 50,
        tol: float = 1e-6,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
        **ported_names: NoReturn,
    ) -> None:
        reject_ported_names("NeuralNDCGLoss", ported_names, NEURAL_PORTED_NAMES)
        check_neural_options(
            k=k, temperature=temperature, max_iter=max_iter, tol=tol, reduction=reduction
        )
        super().__init__(
            gain=gain,
            discount=discount,
            reduction=reduction,
            ignore_index=ignore_index,
            validate_args=validate_args,
        )
        self.temperature = temperature
        self.k = k
        self.max_iter = max_iter
        self.tol = tol

    def forward(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) scales each item's gain, for example
        ``1 / propensity`` on clicks (inverse-propensity weighting).
        """
        return neural_ndcg_loss(
            preds,
            target,
            temperature=self.temperature,
            k=self.k,
            max_iter=self.max_iter,
            tol=self.tol,
            gain=self.gain,
            discount=self.discount,
            reduction=self.reduction,
            mask=mask,
            ignore_index=self.ignore_index,
            validate_args=self.validate_args,
            weight=weight,
        )

    def extra_repr(self) -> str:
        """Hyper-parameters shown by ``repr``."""
        return (
            f"temperature={self.temperature}, k={self.k}, max_iter={self.max_iter}, tol={self.tol}"
        )
