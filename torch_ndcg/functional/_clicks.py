"""Click models: examination probabilities and simulated clicks on a logged ranking."""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from torch_ndcg import _options, _validation

__all__ = ["examination_probability", "simulate_clicks"]

ClickModel = Literal["position_based", "cascade"]


def examination_probability(positions: Tensor, *, eta: float = 1.0) -> Tensor:
    r"""Probability that a user examines each position: $(1 / (i + 1))^\eta$, 0 if not shown.

    The position-based model of Joachims, Swaminathan & Schnabel (WSDM 2017): the examination
    probability falls as a power of the 1-based rank, $\eta$ setting how steeply ($\eta = 0$:
    every position is examined). Its inverse is the inverse-propensity weight of a click,
    ``weight = 1 / examination_probability(positions)`` on the shown items.

    Args:
        positions: integer tensor of 0-based display positions (0 = top); -1 marks an item
            that was not shown.
        eta: non-negative severity $\eta$ of the position bias.

    Returns:
        A float tensor of the shape of ``positions`` (the default dtype).

    Raises:
        TypeError: ``positions`` is not an integer tensor.
        ValueError: negative or non-finite ``eta``, a position below -1.

    Example:
        >>> import torch
        >>> from torch_ndcg import examination_probability
        >>> examination_probability(torch.tensor([0, 1, 3, -1]))
        tensor([1.0000, 0.5000, 0.2500, 0.0000])
    """
    _validation.check_positive("eta", eta, allow_zero=True)
    _validation.resolve_checks(_validation.check_positions(positions, None, None, None))
    shown = positions != _options.NOT_SHOWN
    return torch.where(shown, _examined(positions, eta, torch.get_default_dtype()), 0)


def _examined(positions: Tensor, eta: float, dtype: torch.dtype) -> Tensor:
    r"""$(p + 1)^{-\eta}$ at checked ``positions`` (any value where not shown), in ``dtype``."""
    return (positions + 1).clamp(min=1).to(dtype).pow(-eta)


def simulate_clicks(
    target: Tensor,
    positions: Tensor,
    *,
    model: ClickModel = "position_based",
    eta: float = 1.0,
    examination: Tensor | None = None,
    noise: float = 0.1,
    max_label: float = 4.0,
    mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Clicks of simulated users on items with relevance ``target`` shown at ``positions``.

    An examined item is clicked with its attractiveness, the probability of Chapelle et al.
    (CIKM 2009) used by the unbiased learning-to-rank literature (Ai et al. 2018, Hu et al.
    2019):

    $$
    \gamma(y) = \epsilon + (1 - \epsilon) \, \frac{2^y - 1}{2^{y_\max} - 1},
    $$

    $\epsilon$ = ``noise`` being the click probability of an irrelevant examined item. Which
    items are examined depends on ``model``:

    - ``"position_based"``: each position $i$ (0-based) independently, with probability
      $\theta_i$ = ``examination[i]``, or $(1 / (i + 1))^\eta$ without it
      (`examination_probability`); $P(c = 1) = \theta_i \, \gamma(y)$.
    - ``"cascade"`` (Craswell et al., WSDM 2008): the user reads from the top and stops at the
      first click; an item is clicked if it is attractive and no item above it was.

    Items not shown (position -1) and padded items (``mask`` False) are never clicked; the
    positions of padded items are never read or checked (they may be anything). Every list is
    drawn at once on the device of ``target``, from ``generator`` if given.

    Args:
        target: ``[..., L]`` relevance labels in $[0, y_\max]$.
        positions: ``[..., L]`` integer display positions (0 = top, -1 = not shown); those
            of padded items are ignored.
        model: ``"position_based"`` or ``"cascade"``.
        eta: non-negative severity of the default examination probabilities.
        examination: 1-D probabilities of examining each position, or ``None``.
        noise: click probability $\epsilon$ of an irrelevant examined item, in [0, 1].
        max_label: the largest label $y_\max$, positive.
        mask: ``[..., L]`` bool, ``True`` for real items.
        generator: a `torch.Generator` on the device of ``target``, for reproducible clicks.

    Returns:
        ``[..., L]`` clicks, 0 or 1, in the default float dtype.

    Raises:
        TypeError: non-tensor input, ``positions`` not integer, ``mask`` not bool.
        ValueError: bad ``model``, ``eta``, ``noise``, ``max_label``, ``examination``, shapes
            that disagree, labels outside $[0, y_\max]$, positions of real items below -1 or
            past ``examination``.

    Example:
        With no noise an irrelevant item is never clicked and a perfect one always is when
        examined; the top position is always examined:

        >>> import torch
        >>> from torch_ndcg import simulate_clicks
        >>> target = torch.tensor([[4, 0, 4]])
        >>> positions = torch.tensor([[0, 1, -1]])
        >>> seeded = torch.Generator().manual_seed(0)
        >>> simulate_clicks(target, positions, noise=0.0, generator=seeded)
        tensor([[1., 0., 0.]])
    """
    _validation.check_option("model", model, get_args(ClickModel), callable_ok=False)
    _validation.check_positive("eta", eta, allow_zero=True)
    noise, real_labels = _validation.check_click_simulation(
        target, positions, mask, examination, noise, max_label
    )
    attractiveness = noise + (1 - noise) * (2**real_labels - 1) / (2**max_label - 1)
    if mask is not None:  # padded items are not shown: their positions are never read
        positions = torch.where(mask, positions, _options.NOT_SHOWN)
    shown = positions != _options.NOT_SHOWN
    draws = torch.rand(target.shape, generator=generator, device=target.device)
    if model == "position_based":
        if examination is None:  # `examination_probability` where shown (checked above)
            examined = _examined(positions, eta, real_labels.dtype)
        else:
            examined = examination.to(real_labels.dtype)[positions.long().clamp(min=0)]
        clicked = draws < examined * attractiveness
    else:
        attractive = (draws < attractiveness) & shown
        # In display order, an item is clicked if it is the first attractive one.
        order = torch.where(shown, positions.long(), torch.iinfo(torch.int64).max).argsort(dim=-1)
        in_order = attractive.gather(-1, order)
        first = in_order & (in_order.cumsum(dim=-1) == 1)
        clicked = torch.zeros_like(first).scatter_(-1, order, first)
    return (clicked & shown).to(real_labels.dtype)
