"""Ranking losses as ``nn.Module``: they store hyper-parameters and call the functional losses."""

from dataclasses import fields
from typing import Any, ClassVar

from torch import Tensor, nn

from torch_ndcg import _validation
from torch_ndcg._options import Discount, Gain, LossOptions, Reduction, Weighting
from torch_ndcg.functional._losses import APPROX, LAMBDARANK, NEURAL, Loss

__all__ = ["ApproxNDCGLoss", "LambdaRankLoss", "NeuralNDCGLoss"]


def _option(name: str) -> Any:
    """A hyper-parameter of the module, read from its checked options.

    Setting it checks the new value (with the others) into new options, as ``__init__`` did.
    """

    def get(self: "_RankingLoss") -> Any:
        return getattr(self.options, name)

    def set_(self: "_RankingLoss", value: Any) -> None:
        given = {field.name: getattr(self.options, field.name) for field in fields(self.options)}
        self.options = self._loss.check(**{**given, name: value})

    return property(get, set_, doc=f"``{name}``, as checked into `options`.")


class _RankingLoss(nn.Module):
    """A loss module: its options checked once, in ``__init__``; ``forward`` checks tensors.

    Subclasses name their function's `torch_ndcg.functional._losses.Loss` (``_loss``: its
    checker and unchecked core) and the hyper-parameters ``repr`` shows (``_shown``); their
    ``__init__`` takes the keywords, with their defaults, and checks them into ``options``.
    """

    options: LossOptions
    _loss: ClassVar[Loss]
    _shown: ClassVar[tuple[str, ...]]

    k = _option("k")
    gain = _option("gain")
    discount = _option("discount")
    reduction = _option("reduction")
    ignore_index = _option("ignore_index")
    validate_args = _option("validate_args")

    def __init__(self, options: LossOptions) -> None:
        super().__init__()
        self.options = options

    # Alike in shape to `NDCG.update`'s signature (`duplicates` pairs them): tensors, not options.
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
        return self._loss.loss(preds, target, mask, self.options, weight)

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

    Keyword Args:
        k: truncation level of $|\Delta \mathrm{nDCG@}k|$, a positive int, or ``None`` (the
            default) for the whole list.
        sigma: positive slope $\sigma$ of the logistic loss; default 1.
        weighting: ``"lambdarank"`` (the default), ``"ndcg2"`` or ``"ndcg2pp"``.
        mu: non-negative weight of the NDCG-Loss2 term in ``"ndcg2pp"``; default 10.
        gain, discount, reduction, ignore_index, validate_args: as `lambdarank_loss` (defaults
            ``"exponential"``, ``"log2"``, ``"mean"``, ``None``, ``True``).

    A name from allRank or TF-Ranking (``weighing_scheme``, ``padded_value_indicator``, ...)
    raises ``TypeError`` naming ours.

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

    # The three modules' bodies are alike in shape only (`duplicates` pairs them): each names
    # its own Loss, what repr shows, its hyper-parameters and its typed keywords.
    _loss = LAMBDARANK
    _shown = ("k", "sigma", "weighting", "mu")
    sigma = _option("sigma")
    weighting = _option("weighting")
    mu = _option("mu")

    @_validation.names_ported_keywords(_validation.LAMBDARANK_PORTED_NAMES)
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
    ) -> None:
        options = _validation.check_lambdarank_options(
            k, sigma, weighting, mu, gain, discount, reduction, ignore_index, validate_args
        )
        super().__init__(options)


class ApproxNDCGLoss(_RankingLoss):
    r"""One minus the sigmoid-smoothed nDCG@k of Qin, Liu & Li (2010); see `approx_ndcg_loss`.

    $$
    \hat r_i = 1 + \sum_{j \ne i} \operatorname{sigmoid}\Bigl(\frac{s_j - s_i}{T}\Bigr),
    \qquad \ell = 1 - \frac{1}{Z} \sum_i G_i \, D(\hat r_i)
    $$

    Keyword Args:
        temperature: positive $T$ of the sigmoid; default 1.
        k: smooth cut-off, a positive int, or ``None`` (the default) for the whole list.
        gain, discount, reduction, ignore_index, validate_args: as `lambdarank_loss` (defaults
            ``"exponential"``, ``"log2"``, ``"mean"``, ``None``, ``True``).

    A name from allRank or TF-Ranking (``alpha``, ``padded_value_indicator``, ...) raises
    ``TypeError`` naming ours.

    Example:
        >>> import torch
        >>> from torch_ndcg import ApproxNDCGLoss
        >>> loss_fn = ApproxNDCGLoss(temperature=0.01)
        >>> preds = torch.tensor([[0.0, 1.0, 2.0]])
        >>> target = torch.tensor([[2, 1, 0]])
        >>> loss_fn(preds, target)  # 1 - (3/log2(4) + 1/log2(3)) / (3 + 1/log2(3))
        tensor(0.4131)
    """

    _loss = APPROX
    _shown = ("temperature", "k")
    temperature = _option("temperature")

    @_validation.names_ported_keywords(_validation.APPROX_PORTED_NAMES)
    def __init__(
        self,
        *,
        k: int | None = None,
        temperature: float = 1.0,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        options = _validation.check_approx_options(
            k, temperature, gain, discount, reduction, ignore_index, validate_args
        )
        super().__init__(options)


class NeuralNDCGLoss(_RankingLoss):
    r"""One minus nDCG@k of a NeuralSort + Sinkhorn relaxed sort; see `neural_ndcg_loss`.

    $$
    \hat P_{ij} = \operatorname{softmax}_j\Bigl(
        \frac{(n + 1 - 2i) \, s_j - \sum_k |s_j - s_k|}{T}\Bigr),
    \qquad \ell = 1 - \frac{1}{Z} \sum_{i \le k} D(i) \sum_j
        \operatorname{Sinkhorn}(\hat P)_{ij} \, G_j
    $$

    Keyword Args:
        temperature, k, max_iter, tol: as `neural_ndcg_loss` (defaults 1, ``None``, 50 and
            1e-6).
        gain, discount, reduction, ignore_index, validate_args: as `lambdarank_loss` (defaults
            ``"exponential"``, ``"log2"``, ``"mean"``, ``None``, ``True``).

    A name from allRank (``padded_value_indicator``, ``powered_relevancies``, ...) raises
    ``TypeError``.

    Example:
        >>> import torch
        >>> from torch_ndcg import NeuralNDCGLoss

        At a small temperature the relaxed sort is the ranking; with ``k=2`` only its top two
        count, labels 0 and 1 against the ideal 2 and 1.

        >>> loss_fn = NeuralNDCGLoss(temperature=0.01, k=2)
        >>> preds = torch.tensor([[0.0, 1.0, 2.0]])
        >>> target = torch.tensor([[2, 1, 0]])
        >>> loss_fn(preds, target)  # 1 - (1/log2(3)) / (3 + 1/log2(3))
        tensor(0.8262)
    """

    _loss = NEURAL
    _shown = ("temperature", "k", "max_iter", "tol")
    temperature = _option("temperature")
    max_iter = _option("max_iter")
    tol = _option("tol")

    @_validation.names_ported_keywords(_validation.NEURAL_PORTED_NAMES)
    def __init__(
        self,
        *,
        k: int | None = None,
        temperature: float = 1.0,
        max_iter: int = 50,
        tol: float = 1e-6,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        options = _validation.check_neural_options(
            k, temperature, max_iter, tol, gain, discount, reduction, ignore_index, validate_args
        )
        super().__init__(options)
