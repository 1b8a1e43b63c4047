"""Ranking losses as ``nn.Module``: they store hyper-parameters and call the functional losses."""

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from torch_ndcg import _validation
from torch_ndcg._options import Discount, Gain, Reduction, Weighting
from torch_ndcg.functional import (
    _click_losses,
    _listmle_losses,
    _pairwise_losses,
    _pl_rank,
    _ranknet_loss,
    _smooth_losses,
    _softmax_losses,
)
from torch_ndcg.functional._click_losses import ClickBiases
from torch_ndcg.functional._loss_input import Checks, LossOptions, check_options

__all__ = [
    "ApproxNDCGLoss",
    "LambdaRankLoss",
    "ListMLELoss",
    "NeuralNDCGLoss",
    "PLRankLoss",
    "RankNetLoss",
    "SoftmaxLoss",
    "UnbiasedLambdaRankLoss",
    "XENDCGLoss",
]


def _option(name: str, doc: str = "") -> Any:
    """A hyper-parameter of the module, read from its checked options.

    Setting it checks the new value (with the others) into new options, as ``__init__`` did.
    """

    def get(self: Any) -> Any:
        return getattr(self.options, name)

    def set_(self: Any, value: Any) -> None:
        self.options = check_options(self._checks, **{**vars(self.options), name: value})

    return property(get, set_, doc=doc or f"``{name}``, as checked into `options`.")


def _no_option(name: str) -> Any:
    """A hyper-parameter the softmax losses lack: ``None``; setting it raises, naming it."""

    def set_(self: nn.Module, value: Any) -> None:
        raise AttributeError(
            f"`{type(self).__name__}` takes no `{name}` (no cut-off and no discount), but was "
            f"given {value!r}."
        )

    return property(lambda self: None, set_, doc="``None``: no cut-off and no discount.")


class _RankingLoss(nn.Module):
    """A loss module: its options checked once, in ``__init__``; ``forward`` checks tensors.

    Each subclass's ``__init__`` checks its keywords into ``options`` with the checks of its
    own options (``_checks``), its ``forward`` calls its loss's core with them, and ``repr``
    shows the hyper-parameters ``_shown``. The options every loss shares are properties here,
    the others in each subclass.
    """

    options: LossOptions
    _checks: ClassVar[Checks]
    _shown: ClassVar[tuple[str, ...]]
    k, gain, discount = _option("k"), _option("gain"), _option("discount")
    reduction, ignore_index = _option("reduction"), _option("ignore_index")
    validate_args = _option("validate_args")

    def extra_repr(self) -> str:
        """Hyper-parameters shown by ``repr``."""
        return ", ".join(f"{name}={getattr(self.options, name)!r}" for name in self._shown)


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

    _checks = _pairwise_losses.LAMBDARANK_CHECKS
    _shown = ("k", "sigma", "weighting", "mu")
    sigma, weighting, mu = _option("sigma"), _option("weighting"), _option("mu")

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
        super().__init__()
        self.options = check_options(
            self._checks, k=k, sigma=sigma, weighting=weighting, mu=mu, gain=gain,
            discount=discount, reduction=reduction, ignore_index=ignore_index,
            validate_args=validate_args)

    # Alike in shape to `NDCG.update`'s signature (`duplicates` pairs them): tensors, not options.
    def forward(
        self, preds: Tensor, target: Tensor, mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) scales each item's gain, for example
        ``1 / propensity`` on clicks (inverse-propensity weighting).
        """
        return _pairwise_losses._lambdarank(preds, target, mask, weight, self.options)


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

    _checks = _smooth_losses.APPROX_CHECKS
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
        super().__init__()
        self.options = check_options(
            self._checks, k=k, temperature=temperature, gain=gain, discount=discount,
            reduction=reduction, ignore_index=ignore_index, validate_args=validate_args)

    # Alike in shape to `NDCG.update`'s signature (`duplicates` pairs them): tensors, not options.
    def forward(
        self, preds: Tensor, target: Tensor, mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) scales each item's gain, for example
        ``1 / propensity`` on clicks (inverse-propensity weighting).
        """
        return _smooth_losses._approx(preds, target, mask, weight, self.options)


class _ListwiseModule(_RankingLoss):
    """`SoftmaxLoss` and `XENDCGLoss`: the options they share; no cut-off and no discount."""

    _checks = _softmax_losses.SOFTMAX_CHECKS
    _shown = ("gain",)
    k, discount = _no_option("k"), _no_option("discount")

    @_validation.names_ported_keywords(_softmax_losses._CROSS_ENTROPY_PORTED_NAMES)
    def __init__(
        self,
        *,
        gain: Gain = "exponential",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        super().__init__()
        self.options = check_options(
            self._checks, gain=gain, reduction=reduction, ignore_index=ignore_index,
            validate_args=validate_args)


class SoftmaxLoss(_ListwiseModule):
    r"""Softmax cross-entropy against the list's normalised gains; see `softmax_loss`.

    $$
    p_i = \frac{G_i}{\sum_j G_j}, \qquad
    \ell = -\sum_i w_i \, p_i \log \frac{e^{s_i}}{\sum_j e^{s_j}}
    $$

    ListNet is ``gain=torch.exp``; TF-Ranking's ``SoftmaxLoss`` and Rax's ``softmax_loss``
    (normalised labels) are ``gain="linear"``.

    Keyword Args:
        gain, reduction, ignore_index, validate_args: as `softmax_loss` (defaults
            ``"exponential"``, ``"mean"``, ``None``, ``True``).

    Example:
        >>> import torch
        >>> from torch_ndcg import SoftmaxLoss
        >>> loss_fn = SoftmaxLoss(ignore_index=-1)
        >>> preds = torch.tensor([[0.0, 1.0, 5.0]])
        >>> loss_fn(preds, torch.tensor([[1, 0, -1]]))  # log(1 + e)
        tensor(1.3133)
    """

    def forward(
        self, preds: Tensor, target: Tensor, mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) scales each item's gain, for example
        ``1 / propensity`` on clicks (inverse-propensity weighting).
        """
        return _softmax_losses._softmax(preds, target, mask, weight, self.options)


class XENDCGLoss(_ListwiseModule):
    r"""XE-NDCG (Bruch, WWW 2021), noisy normalised gains as target; see `xe_ndcg_loss`.

    $$
    \rho_i = \frac{G_i + 1 - \gamma_i}{\sum_j (G_j + 1 - \gamma_j)}, \quad
    \gamma_i \sim U[0, 1), \qquad
    \ell = -\sum_i w_i \, \rho_i \log \frac{e^{s_i}}{\sum_j e^{s_j}}
    $$

    Keyword Args:
        gain, reduction, ignore_index, validate_args: as `xe_ndcg_loss` (defaults
            ``"exponential"``, ``"mean"``, ``None``, ``True``).

    Example:
        >>> import torch
        >>> from torch_ndcg import XENDCGLoss
        >>> loss_fn = XENDCGLoss()
        >>> preds, target = torch.tensor([0.0, 1.0]), torch.tensor([1, 0])
        >>> loss_fn(preds, target, noise=torch.full((2,), 0.5))
        tensor(1.0633)
    """

    def forward(
        self, preds: Tensor, target: Tensor, mask: Tensor | None = None,
        weight: Tensor | None = None, *, noise: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        r"""Loss of ``[..., L]`` scores against labels, as `xe_ndcg_loss`.

        The noise $\gamma$ is drawn at every call from ``generator`` (on ``preds``' device;
        ``None``: torch's default generator), or given as ``noise`` (``[..., L]``, in
        $[0, 1]$).
        """
        return _softmax_losses._xe_ndcg(
            preds, target, mask, weight, self.options, (noise, generator)
        )


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

    _checks = _smooth_losses.NEURAL_CHECKS
    _shown = ("temperature", "k", "max_iter", "tol")
    temperature, max_iter, tol = _option("temperature"), _option("max_iter"), _option("tol")

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
        super().__init__()
        self.options = check_options(
            self._checks, k=k, temperature=temperature, max_iter=max_iter, tol=tol, gain=gain,
            discount=discount, reduction=reduction, ignore_index=ignore_index,
            validate_args=validate_args)

    # Alike in shape to `NDCG.update`'s signature (`duplicates` pairs them): tensors, not options.
    def forward(
        self, preds: Tensor, target: Tensor, mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) scales each item's gain, for example
        ``1 / propensity`` on clicks (inverse-propensity weighting).
        """
        return _smooth_losses._neural(preds, target, mask, weight, self.options)


class UnbiasedLambdaRankLoss(_RankingLoss):
    r"""LambdaRank on clicks with position biases learnt jointly (Unbiased LambdaMART).

    Hu, Wang, Peng & Li, "Unbiased LambdaMART: An Unbiased Pairwise Learning-to-Rank
    Algorithm" (WWW 2019). A click on an item shown at position $i$ is more likely the
    higher $i$ is shown, so a pair (clicked $w$ at position $i$, unclicked $l$ at position
    $j$) is weighted by the inverse of the position biases of clicks, $t^+_i$, and of
    non-clicks, $t^-_j$:

    $$
    \ell = \sum_{c_w = 1, \, c_l = 0}
        \frac{|\Delta \mathrm{nDCG@}k_{wl}|}{t^+_{i(w)} \, t^-_{j(l)}}
        \log\bigl(1 + e^{-\sigma (s_w - s_l)}\bigr)
    $$

    (`lambdarank_loss` on the clicks with ``weighting="lambdarank"``, each pair's weight
    divided by the two biases). After each training step (``self.training``) the biases take
    the paper's closed-form update, with $L_{wl}$ the pair's LambdaRank loss (without the
    biases), $Z$ the ideal DCG@k of its session's clicks and $p$ = ``bias_norm``:

    $$
    t^+_i = \left(\frac{S^+_i}{R^+_i}\right)^{\frac{1}{p + 1}}, \quad
    S^+_i = \sum_{w \text{ at } i} \sum_l \frac{Z L_{wl}}{t^-_{j(l)}}, \qquad
    t^-_j = \left(\frac{S^-_j}{R^-_j}\right)^{\frac{1}{p + 1}}, \quad
    S^-_j = \sum_{l \text{ at } j} \sum_w \frac{Z L_{wl}}{t^+_{i(w)}}.
    $$

    The statistics leave out LambdaRank's $1 / Z$ so that every click counts alike: the deep
    clicks come mostly from sessions with many clicks (queries with many relevant items), whose
    $1 / Z$ is small, and with it the learnt ratios of the deep positions were 20% low.

    The paper divides by the top position's statistic, $R^\pm_i = S^\pm_0$. With lists of
    unequal length that compares a deep position, shown only by the long lists, with the top
    position of every list, and the deep biases come out too small by the share of lists that
    reach them (their inverse weights too large). So by default (``match_exposure=True``)
    $R^\pm_i$ is the top position's statistic summed over the lists that show position $i$
    only; when every list shows every position the two are the same.

    A boosting iteration of LambdaMART sees the whole data; a gradient step sees a batch, so the
    statistics $S^\pm, R^\pm$ are summed over the steps: by default over every step alike
    (``momentum=1``), as the statistics of one click log read a batch at a time; below 1,
    each earlier step's weighs ``momentum`` per step since (an exponential moving average: a
    window of about $1 / (1 - m)$ steps), and 0 is the paper's update from this batch alone.
    A deep position is clicked rarely: a window of a few small batches holds a handful of its
    clicks, and the ratio of two such sums is too noisy to weight pairs with. Under
    ``torch.distributed`` the batch statistics are summed over the ranks before they are
    added (one all-reduce of ``4 * num_positions`` values), so every rank holds the biases
    one process would learn from the whole batch. The biases and statistics are buffers:
    ``state_dict`` checkpoints them and ``.to()`` moves them (a cast to float16 or bfloat16 leaves
    the sums ``statistics`` in float32); they are sized by ``num_positions``, fixed when the loss
    is made. The sums never become ``inf`` or NaN: a step that would take one past the largest
    value of its dtype (or to NaN, from unchecked input only) is left out of that sum, which
    stays as it was. Positions are 0-based
    (0 = top), $t^\pm_0 = 1$; a position whose statistic is still 0 keeps its bias (1 at the
    start).

    ``bias_norm`` is the $p$ of the paper's $L_p$ regulariser of the biases (XGBoost's
    ``lambdarank_bias_norm``; 2 by default, as XGBoost's): $p = 0$ weights the pairs by the
    ratio of the statistics as it is, a larger $p$ shrinks the biases towards 1, which keeps the
    rarely clicked low positions from taking huge weights. The unshrunk estimate stays readable
    as ``statistics[0] / statistics[2]`` ($= (t^+)^{p + 1}$; ``statistics[1] / statistics[3]``
    for $t^-$; NaN at a position no list has shown yet): the rows of ``statistics`` are the
    sums over the steps of $S^+, S^-, R^+, R^-$ (discounted by ``momentum``). The update holds
    ``[N, 5 * (num_positions + 1)]`` floats for a batch of ``N`` lists.

    Items at position `NOT_SHOWN` (-1), padded items (``mask``, ``ignore_index``) and lists
    without a click take no part: ``reduction="mean"`` divides by the lists with a click on an
    item that takes part, whatever the gain (one positive at 0 gives a list without a click a
    positive ideal DCG, but no pair). Clicks are 0 or 1: another value of a real item raises
    ``ValueError("Expected `clicks` to be 0 or 1 (a click or none), but found <the value>.")``
    (the same message from a device-side assertion on an accelerator and under
    ``torch.compile``). Nothing is read back to the host on an accelerator.

    Args:
        num_positions: number of display positions learnt, a positive int; ``positions``
            must be below it. Fixed when the loss is made (setting it raises
            ``AttributeError``): the biases learnt are sized by it.

    Keyword Args:
        bias_norm: non-negative $p$ of the bias update (default 2, as XGBoost's).
        momentum: weight in $[0, 1]$ of the past statistics per step: 1 (the default) sums
            every step's alike, below 1 an exponential moving average, 0 this batch's only.
        match_exposure: compare each position with the top one over the lists that show it
            (``True``, the default) or over every list (``False``, the paper's and XGBoost's
            update).
        k: truncation level of $|\Delta \mathrm{nDCG@}k|$, or ``None`` (the default).
        sigma, gain, discount, reduction, ignore_index, validate_args: as `LambdaRankLoss`
            (both gains equal $c$ on clicks; ``"mean"`` is over the lists with a click on an
            item shown, and ``ignore_index`` a click value).

    A keyword name from another library (``top_k``, ``padded_value_indicator``, ...) raises
    ``TypeError`` naming ours.

    Example:
        >>> import torch
        >>> from torch_ndcg import UnbiasedLambdaRankLoss

        Two sessions of two items, the first item clicked in both; it was shown on top in the
        first session (tied scores: pair loss $L_A = (1 - 1/\log_2 3) \log 2$) and second in
        the other, where it scored 1 below the unclicked item ($L_B = (1 - 1/\log_2 3)
        \log(1 + e)$). At the start every bias is 1 and the loss is the mean of the two.

        >>> loss_fn = UnbiasedLambdaRankLoss(num_positions=2, bias_norm=0.0, momentum=0.0)
        >>> preds = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
        >>> clicks = torch.tensor([[1, 0], [1, 0]])
        >>> positions = torch.tensor([[0, 1], [1, 0]])
        >>> loss_fn(preds, clicks, positions)  # (L_A + L_B) / 2
        tensor(0.3703)

        The update: $t^+_1 = S^+_1 / S^+_0 = L_B / L_A = \log(1 + e) / \log 2 = 1.8946$
        (clicks at position 1 came with larger losses) and $t^-_1 = L_A / L_B = 0.5278$.

        >>> loss_fn.t_plus, loss_fn.t_minus
        (tensor([1.0000, 1.8946]), tensor([1.0000, 0.5278]))
    """

    _checks = _click_losses.UNBIASED_CHECKS
    _shown = ("num_positions", "k", "sigma", "bias_norm", "momentum", "match_exposure")
    sigma, match_exposure = _option("sigma"), _option("match_exposure")
    bias_norm = _option("bias_norm", "The non-negative $p$ of the bias update; checked when set.")
    momentum = _option(
        "momentum", "The weight in $[0, 1]$ of the past statistics; checked when set."
    )
    t_plus: Tensor
    t_minus: Tensor
    statistics: Tensor

    @property
    def num_positions(self) -> int:
        """The number of display positions learnt, fixed when the loss is made.

        The biases learnt (``t_plus``, ``t_minus``) and their ``statistics`` are sized by it:
        setting it raises ``AttributeError``; make a new loss for another number of positions.
        """
        return int(self.options.num_positions)

    @num_positions.setter
    def num_positions(self, value: Any) -> None:
        raise AttributeError(
            f"`num_positions` of `{type(self).__name__}` is fixed when the loss is made (it is "
            f"{self.options.num_positions}; got {value!r}): the position biases `t_plus`, "
            "`t_minus` and `statistics` are sized by it. Make a new loss with "
            f"`{type(self).__name__}(num_positions={value!r}, ...)` instead."
        )

    @_validation.names_ported_keywords(_validation.UNBIASED_PORTED_NAMES)
    def __init__(
        self,
        *,
        num_positions: int,
        k: int | None = None,
        sigma: float = 1.0,
        bias_norm: float = 2.0,
        momentum: float = 1.0,
        match_exposure: bool = True,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        super().__init__()
        self.options = check_options(
            self._checks, num_positions=num_positions, k=k, sigma=sigma, weighting="lambdarank",
            mu=0.0, bias_norm=bias_norm, momentum=momentum, match_exposure=match_exposure,
            gain=gain, discount=discount, reduction=reduction, ignore_index=ignore_index,
            validate_args=validate_args)
        self.register_buffer("t_plus", torch.ones(self.options.num_positions))
        self.register_buffer("t_minus", torch.ones(self.options.num_positions))
        # Sums over the steps per position of S+, S- and their references R+, R- (rows 0-3).
        self.register_buffer("statistics", torch.zeros(4, self.options.num_positions))
        # The bias of the bins of items not shown: their factor 1 / inf = 0 (see `forward`).
        self._edge: Tensor
        self.register_buffer("_edge", torch.full((1,), math.inf), persistent=False)

    def forward(
        self, preds: Tensor, clicks: Tensor, positions: Tensor, mask: Tensor | None = None
    ) -> Tensor:
        """Loss of ``[..., L]`` scores on 0/1 ``clicks`` of items shown at ``positions``.

        ``positions`` (integer, 0 = top, -1 = not shown) are where the logged ranking showed
        each item; ``mask`` marks real items. In training mode the biases are updated after
        the loss is computed (the loss uses the biases from before the step).
        """
        biases = ClickBiases(self.t_plus, self.t_minus, self.statistics, self._edge, self.training)
        return _click_losses._unbiased_lambdarank(
            preds, clicks, positions, mask, self.options, biases
        )

    def aggregated(
        self, preds: Tensor, clicks: Tensor, views: Tensor, mask: Tensor | None = None
    ) -> Tensor:
        r"""The loss of ``[..., L]`` scores on sessions summed per item and position.

        A click log of many sessions of the same lists need not be fed session by session:
        ``clicks[..., w, i]`` and ``views[..., w, i]`` (``[..., L, num_positions]``,
        non-negative, ``clicks <= views``) count how often item $w$ was clicked and shown at
        position $i$ in the sessions of its list. With $A_w = \sum_i \mathrm{clicks}_{wi} / t^+_i$
        and $B_l = \sum_j (\mathrm{views}_{lj} - \mathrm{clicks}_{lj}) / t^-_j$:

        $$
        \ell = \sum_{w \ne l} A_w B_l \, |\Delta D_{wl}| \,
            \log\bigl(1 + e^{-\sigma (s_w - s_l)}\bigr),
        $$

        with $|\Delta D_{wl}|$ the change of the DCG@k discount when $w$ and $l$ swap places
        in the current ranking. On one session whose counts (one-hot at each shown item's
        position) are multiplied by $1 / \sqrt{Z}$, $Z$ the ideal DCG@k of its clicks, this is
        `forward`'s loss exactly; on the one-hot counts themselves, its bias updates are
        `forward`'s, $S^+_i = \sum_w \mathrm{clicks}_{wi} \sum_l B_l L_{wl}$ and
        $S^-_j = \sum_l (\mathrm{views}_{lj} - \mathrm{clicks}_{lj}) \sum_w A_w L_{wl}$;
        with ``match_exposure`` a list's top statistic counts towards $R_i$ times the share of
        its sessions that show position $i$, $\sum_w \mathrm{views}_{wi} / \sum_w
        \mathrm{views}_{w0}$ (1 or 0 for one session). Over many sessions, pass the means over
        the sessions of their counts (per-position click-through and view rates): the loss is
        then the mean over the sessions of the per-session pair losses (without LambdaRank's
        $1 / Z_s$), up to the correlation of two items' clicks within a session, since the mean
        of a pair's weights
        $\overline{a_w b_l}$ is taken as the product of the items' means $\bar a_w \bar b_l$
        (in the position-based click model two items' clicks are independent given their
        positions; what is left is that two items never share a position: 2% on 6 items in
        the tests). The cost is that of one list per query whatever the number of sessions; the
        pairs are computed densely (``[N, L, L]``), for lists of up to a few thousand items.
        Only items with views are ranked, as `forward` ranks only the items shown: an item never
        shown, like a padded one, takes no rank, and its score is never read (it may be NaN).

        Args:
            preds: ``[..., L]`` floating scores.
            clicks: ``[..., L, num_positions]`` floating click counts (or weighted sums).
            views: ``[..., L, num_positions]`` floating counts of the times shown, at least
                ``clicks``.
            mask: ``[..., L]`` bool, ``True`` for real items, or ``None``.

        Returns:
            The reduced loss (``reduction``; ``"mean"`` is over the lists with a positive
            click count on an item with views, as `forward` counts one session's lists).

        Raises:
            TypeError: a tensor of the wrong dtype.
            ValueError: shapes that disagree, or (``validate_args``, before the biases learn
                anything) NaN or infinite scores of ranked items, or counts of a real item (with
                views or not) that are NaN, negative, not finite, or clicks above views, each
                naming the argument and the value found (the same message from a device-side
                assertion on an accelerator, a ``RuntimeError`` under ``torch.compile``).
                Padded items' counts and scores are never read.

        Example:
            >>> import torch
            >>> from torch_ndcg import UnbiasedLambdaRankLoss
            >>> loss_fn = UnbiasedLambdaRankLoss(num_positions=2, bias_norm=0.0, momentum=0.0)

            The two sessions of `forward`'s example, summed: item 0 clicked once at each
            position, item 1 shown once at each position and never clicked.

            >>> preds = torch.tensor([0.0, 1.0])
            >>> clicks = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
            >>> views = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
            >>> loss_fn.aggregated(preds, clicks, views)  # 2 * 2 (1 - 1/log2 3) log(1 + e)
            tensor(1.9387)
        """
        biases = ClickBiases(self.t_plus, self.t_minus, self.statistics, self._edge, self.training)
        return _click_losses._aggregated_unbiased_lambdarank(
            preds, clicks, views, mask, self.options, biases
        )

    def _apply(self, fn: Any, recurse: bool = True) -> "UnbiasedLambdaRankLoss":
        """``.to()``, ``.half()``, ...; ``statistics`` keeps at least float32 (and its values).

        They are sums over every step: float16 would overflow to inf in a few thousand steps
        (a model cast by ``.half()`` or Lightning's ``precision="16-true"``), bfloat16 stop
        adding once they reach 256 batches' worth.
        """
        statistics = self.statistics
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        if self.statistics.dtype in (torch.float16, torch.bfloat16):
            self.statistics = statistics.to(
                self.statistics.device, torch.promote_types(statistics.dtype, torch.float32)
            )
        return self


class PLRankLoss(_RankingLoss):
    r"""PL-Rank-3 (Oosterhuis 2021, 2022): the expected nDCG@k of a Plackett-Luce policy.

    The gradient is the PL-Rank-3 estimate of minus the gradient of
    $\mathcal{R} = \mathbb{E}_{y \sim \pi}[\mathrm{nDCG@}k(y)]$ for the policy
    $\pi(d \mid y_{1:i-1}) \propto e^{s_d}$, from ``num_samples`` rankings drawn by Gumbel
    top-k; the value is $1 - $ their mean nDCG@k. See `pl_rank_loss`.

    Keyword Args:
        k: cut-off of the nDCG, a positive int, or ``None`` (the default) for the whole list.
        num_samples: rankings drawn per list and step, a positive int; default 100.
        generator: the ``torch.Generator`` the sampling draws from at every step (on the
            scores' device), or ``None`` (the default) for the default one.
        gain, discount, reduction, ignore_index, validate_args: as `lambdarank_loss` (defaults
            ``"exponential"``, ``"log2"``, ``"mean"``, ``None``, ``True``).

    Example:
        >>> import torch
        >>> from torch_ndcg import PLRankLoss

        Far-apart scores make the policy deterministic: every ranking drawn is the order of the
        scores, of nDCG $(1 + 3 / \log_2 3) / (3 + 1 / \log_2 3) = 0.7967$, and the gradient
        vanishes.

        >>> loss_fn = PLRankLoss(generator=torch.Generator().manual_seed(0))
        >>> preds = torch.tensor([[0.0, 50.0, 100.0]], requires_grad=True)
        >>> loss = loss_fn(preds, torch.tensor([[0, 2, 1]]))
        >>> round(loss.item(), 4)
        0.2033
        >>> loss.backward()
        >>> preds.grad.abs().max() < 1e-6
        tensor(True)
    """

    _checks = _pl_rank.PL_RANK_CHECKS
    _shown = ("k", "num_samples")
    num_samples, generator = _option("num_samples"), _option("generator")

    @_validation.names_ported_keywords(_pl_rank.PL_RANK_PORTED_NAMES)
    def __init__(
        self,
        *,
        k: int | None = None,
        num_samples: int = 100,
        generator: torch.Generator | None = None,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        super().__init__()
        self.options = check_options(
            self._checks, k=k, num_samples=num_samples, generator=generator, gain=gain,
            discount=discount, reduction=reduction, ignore_index=ignore_index,
            validate_args=validate_args)

    def forward(
        self, preds: Tensor, target: Tensor, mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) scales each item's gain, for example
        ``1 / propensity`` on clicks (inverse-propensity weighting).
        """
        return _pl_rank._pl_rank(preds, target, mask, weight, self.options)


class RankNetLoss(nn.Module):
    r"""RankNet: a logistic loss on every pair of differing labels; see `ranknet_loss`.

    $$
    \ell = \sum_{y_w > y_l} v_w \, \log\bigl(1 + e^{-\sigma (s_w - s_l)}\bigr)
    $$

    Hyper-parameters are checked here, once (and again when one is set); ``forward`` checks
    the tensors.

    Keyword Args:
        sigma: positive slope $\sigma$ of the logistic loss; default 1.
        reduction, ignore_index, validate_args: as `ranknet_loss` (defaults ``"mean"``,
            ``None``, ``True``).

    Example:
        >>> import torch
        >>> from torch_ndcg import RankNetLoss

        One pair (the last item is padding), its winner scored 1 below: loss
        $\log(1 + e) = 1.3133$, gradient $\mp \operatorname{sigmoid}(1) = \mp 0.7311$.

        >>> loss_fn = RankNetLoss(ignore_index=-1)
        >>> preds = torch.tensor([[1.0, 2.0, 0.0]], requires_grad=True)
        >>> target = torch.tensor([[1, 0, -1]])
        >>> loss = loss_fn(preds, target)
        >>> round(loss.item(), 4)
        1.3133
        >>> loss.backward()
        >>> preds.grad
        tensor([[-0.7311,  0.7311,  0.0000]])
    """

    options: LossOptions
    _checks = _ranknet_loss.RANKNET_CHECKS
    sigma, reduction = _option("sigma"), _option("reduction")
    ignore_index, validate_args = _option("ignore_index"), _option("validate_args")

    @_validation.names_ported_keywords(_ranknet_loss.RANKNET_PORTED_NAMES)
    def __init__(
        self,
        *,
        sigma: float = 1.0,
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        super().__init__()
        self.options = _ranknet_loss.ranknet_options(
            sigma=sigma, reduction=reduction, ignore_index=ignore_index, validate_args=validate_args
        )

    def forward(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) weighs each pair by its winner's weight.
        """
        return _ranknet_loss._ranknet(preds, target, mask, weight, self.options)

    def extra_repr(self) -> str:
        """Hyper-parameters shown by ``repr``."""
        return f"sigma={self.options.sigma!r}"


class ListMLELoss(nn.Module):
    r"""ListMLE, or with ``position_aware`` p-ListMLE; see `listmle_loss`.

    $$
    \ell = -\sum_{i=1}^{n} \alpha_i \, v_{\pi_i}
        \log \frac{e^{s_{\pi_i}}}{\sum_{j=i}^{n} e^{s_{\pi_j}}}
    $$

    Hyper-parameters are checked here, once (and again when one is set); ``forward`` checks
    the tensors.

    Keyword Args:
        position_aware: the position weights $\alpha$ of p-ListMLE (Lan et al. 2014; default
            ``False``: 1).
        reduction, ignore_index, validate_args: as `listmle_loss` (defaults ``"mean"``,
            ``None``, ``True``).

    Example:
        >>> import torch
        >>> from torch_ndcg import ListMLELoss

        Labels 2, 1, 0 scored in the right order 2, 1, 0: the likelihood is
        $\frac{e^2}{e^2 + e + 1} \cdot \frac{e}{e + 1}$, so the loss is
        $\log(1 + e^{-1} + e^{-2}) + \log(1 + e^{-1}) = 0.7209$.

        >>> loss_fn = ListMLELoss()
        >>> loss_fn(torch.tensor([2.0, 1.0, 0.0]), torch.tensor([2, 1, 0]))
        tensor(0.7209)
    """

    options: LossOptions
    _checks = _listmle_losses.LISTMLE_CHECKS
    position_aware, reduction = _option("position_aware"), _option("reduction")
    ignore_index, validate_args = _option("ignore_index"), _option("validate_args")

    @_validation.names_ported_keywords(_listmle_losses.LISTMLE_PORTED_NAMES)
    def __init__(
        self,
        *,
        position_aware: bool = False,
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        super().__init__()
        self.options = _listmle_losses.listmle_options(
            position_aware=position_aware,
            reduction=reduction,
            ignore_index=ignore_index,
            validate_args=validate_args,
        )

    def forward(
        self,
        preds: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores against labels; ``mask`` marks real items.

        ``weight`` (``[..., L]``, non-negative) multiplies the term of each item's position.
        """
        return _listmle_losses._listmle(preds, target, mask, weight, self.options)

    def extra_repr(self) -> str:
        """Hyper-parameters shown by ``repr``."""
        return f"position_aware={self.options.position_aware!r}"
