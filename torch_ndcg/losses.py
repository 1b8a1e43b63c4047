"""Ranking losses as ``nn.Module``: they store hyper-parameters and call the functional losses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, NoReturn

from torch import Tensor, nn

from torch_ndcg._options import (
    Discount,
    Gain,
    LossOptions,
    Reduction,
    Weighting,
)
from torch_ndcg._validation import (
    APPROX_PORTED_NAMES,
    LAMBDARANK_PORTED_NAMES,
    NEURAL_PORTED_NAMES,
    check_approx_options,
    check_lambdarank_options,
    check_neural_options,
    reject_ported_names,
)
from torch_ndcg.functional._losses import _approx, _lambdarank, _neural

__all__ = ["ApproxNDCGLoss", "LambdaRankLoss", "NeuralNDCGLoss"]


def _option(name: str) -> Any:
    """A hyper-parameter of the module, read from its checked options.

    Setting it checks the new value (with the others) into new options, as ``__init__`` did.
    """

    def get(self: _RankingLoss) -> Any:
        return getattr(self.options, name)

    def set_(self: _RankingLoss, value: Any) -> None:
        given = {field.name: getattr(self.options, field.name) for field in fields(self.options)}
        self.options = type(self)._check(**{**given, name: value})

    return property(get, set_, doc=f"``{name}``, as checked into `options`.")


class _RankingLoss(nn.Module):
    """A loss module: its options checked once, in ``__init__``; ``forward`` checks tensors.

    Subclasses name their checker (``_check``), the function's unchecked core (``_core``) and
    the hyper-parameters ``repr`` shows (``_shown``). Their ``__init__`` spell every keyword out
    with its default, as the functions do: the public signatures that type checkers and the
    docs read, so these lists stay written out (``duplicates`` pairs them).
    """

    options: LossOptions
    _check: Callable[..., LossOptions]
    _core: Callable[[Tensor, Tensor, Tensor | None, Any, Tensor | None], Tensor]
    _shown: tuple[str, ...]

    k = _option("k")
    gain = _option("gain")
    discount = _option("discount")
    reduction = _option("reduction")
    ignore_index = _option("ignore_index")
    validate_args = _option("validate_args")

    def __init__(self, options: LossOptions) -> None:
        super().__init__()
        self.options = options

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
        return type(self)._core(preds, target, mask, self.options, weight)

    def extra_repr(self) -> str:
        """Hyper-parameters shown by ``repr``."""
        return ", ".join(
            f"{name}={getattr(self.options, name)!r}"
            if isinstance(getattr(self.options, name), str)
            else f"{name}={getattr(self.options, name)}"
            for name in self._shown
        )


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

    _check = staticmethod(check_lambdarank_options)
    _core = staticmethod(_lambdarank)
    _shown = ("k", "sigma", "weighting", "mu")
    sigma = _option("sigma")
    weighting = _option("weighting")
    mu = _option("mu")

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
        super().__init__(
            check_lambdarank_options(
                k, sigma, weighting, mu, gain, discount, reduction, ignore_index, validate_args
            )
        )


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

    _check = staticmethod(check_approx_options)
    _core = staticmethod(_approx)
    _shown = ("temperature", "k")
    temperature = _option("temperature")

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
        super().__init__(
            check_approx_options(
                temperature, k, gain, discount, reduction, ignore_index, validate_args
            )
        )


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

    _check = staticmethod(check_neural_options)
    _core = staticmethod(_neural)
    _shown = ("temperature", "k", "max_iter", "tol")
    temperature = _option("temperature")
    max_iter = _option("max_iter")
    tol = _option("tol")

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
        super().__init__(
            check_neural_options(
                temperature,
                k,
                max_iter,
                tol,
                gain,
                discount,
                reduction,
                ignore_index,
                validate_args,
            )
        )
