"""Unbiased LambdaRank (Hu et al., WWW 2019): LambdaRank on clicks, debiased by position."""

import math

import torch
import torch.distributed as dist
from torch import Tensor

from torch_ndcg import _clicks, _fast_paths, _kernels, _validation
from torch_ndcg._options import Discount, Gain, LambdaRankOptions, Reduction
from torch_ndcg.functional._losses import (
    LAMBDARANK,
    _LossInput,
    _prepare,
    _reduce,
    lambda_pairs,
)
from torch_ndcg.losses import _option, _RankingLoss

__all__ = ["UnbiasedLambdaRankLoss"]


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
    biases) and $p$ = ``bias_norm``:

    $$
    t^+_i = \left(\frac{S^+_i}{R^+_i}\right)^{\frac{1}{p + 1}}, \quad
    S^+_i = \sum_{w \text{ at } i} \sum_l \frac{L_{wl}}{t^-_{j(l)}}, \qquad
    t^-_j = \left(\frac{S^-_j}{R^-_j}\right)^{\frac{1}{p + 1}}, \quad
    S^-_j = \sum_{l \text{ at } j} \sum_w \frac{L_{wl}}{t^+_{i(w)}}.
    $$

    The paper divides by the top position's statistic, $R^\pm_i = S^\pm_0$. With lists of
    unequal length that compares a deep position, shown only by the long lists, with the top
    position of every list, and the deep biases come out too small by the share of lists that
    reach them (their inverse weights too large). So by default (``match_exposure=True``)
    $R^\pm_i$ is the top position's statistic summed over the lists that show position $i$
    only; when every list shows every position the two are the same.

    A boosting iteration of LambdaMART sees the whole data; a gradient step sees a batch, so the
    statistics $S^\pm$ are an exponential moving average over steps (``momentum`` is the
    weight of the past; 0 is the paper's update from this batch alone). Under
    ``torch.distributed`` the batch statistics are summed over the ranks before they are
    averaged (one all-reduce of ``4 * num_positions`` values), so every rank holds the biases
    one process would learn from the whole batch. The biases and statistics are buffers:
    ``state_dict`` checkpoints them and ``.to()`` moves them. Positions are 0-based (0 = top),
    $t^\pm_0 = 1$; a position whose statistic is still 0 keeps its bias (1 at the start).

    ``bias_norm`` is the $p$ of the paper's $L_p$ regulariser of the biases (XGBoost's
    ``lambdarank_bias_norm``; 2 by default, as XGBoost's): $p = 0$ weights the pairs by the
    ratio of the statistics as it is, a larger $p$ shrinks the biases towards 1, which keeps the
    rarely clicked low positions from taking huge weights. The unshrunk estimate stays readable
    as ``statistics[0] / statistics[2]`` ($= (t^+)^{p + 1}$; ``statistics[1] / statistics[3]``
    for $t^-$; NaN at a position no list has shown yet): the rows of ``statistics`` are the
    moving averages of $S^+, S^-, R^+, R^-$. The update holds ``[N, 5 * (num_positions + 1)]``
    floats for a batch of ``N`` lists.

    Items at position `NOT_SHOWN` (-1), padded items (``mask``, ``ignore_index``) and lists
    without a click take no part: ``reduction="mean"`` divides by the lists with a click on an
    item that takes part, whatever the gain (one positive at 0 gives a list without a click a
    positive ideal DCG, but no pair). Clicks are 0 or 1: another value of a real item raises
    ``ValueError("Expected `clicks` to be 0 or 1 (a click or none), but found <the value>.")``
    (the same message from a device-side assertion on an accelerator and under
    ``torch.compile``). Nothing is read back to the host on an accelerator.

    Args:
        num_positions: number of display positions learnt, a positive int; ``positions``
            must be below it.

    Keyword Args:
        bias_norm: non-negative $p$ of the bias update (default 2, as XGBoost's).
        momentum: weight in $[0, 1)$ of the past statistics in their moving average; default
            0.9.
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

    options: LambdaRankOptions
    _loss = LAMBDARANK
    sigma = _option("sigma")
    t_plus: Tensor
    t_minus: Tensor
    statistics: Tensor

    @_validation.names_ported_keywords(_validation.UNBIASED_PORTED_NAMES)
    def __init__(
        self,
        *,
        num_positions: int,
        k: int | None = None,
        sigma: float = 1.0,
        bias_norm: float = 2.0,
        momentum: float = 0.9,
        match_exposure: bool = True,
        gain: Gain = "exponential",
        discount: Discount = "log2",
        reduction: Reduction = "mean",
        ignore_index: int | None = None,
        validate_args: bool = True,
    ) -> None:
        num_positions = _validation.check_positive_int("num_positions", num_positions)
        options = _validation.check_lambdarank_options(
            k, sigma, "lambdarank", 0.0, gain, discount, reduction, ignore_index, validate_args
        )
        super().__init__(options)
        self.bias_norm = bias_norm  # checked by its setter, as when set later
        self.momentum = momentum
        if not isinstance(match_exposure, bool):
            raise TypeError(f"Expected `match_exposure` to be a bool, but got {match_exposure!r}.")
        self.num_positions = num_positions
        self.match_exposure = match_exposure
        self.register_buffer("t_plus", torch.ones(num_positions))
        self.register_buffer("t_minus", torch.ones(num_positions))
        # Moving averages per position of S+, S- and their references R+, R- (rows 0-3).
        self.statistics: Tensor
        self.register_buffer("statistics", torch.zeros(4, num_positions))
        # The bias of the bins of items not shown: their factor 1 / inf = 0 (see `forward`).
        self._edge: Tensor
        self.register_buffer("_edge", torch.full((1,), math.inf), persistent=False)

    @property
    def bias_norm(self) -> float:
        """The non-negative $p$ of the bias update; checked when set, as in ``__init__``."""
        return self._bias_norm

    @bias_norm.setter
    def bias_norm(self, value: float) -> None:
        _validation.check_positive("bias_norm", value, allow_zero=True)
        self._bias_norm = value

    @property
    def momentum(self) -> float:
        """The weight in $[0, 1)$ of the past statistics; checked when set, as in ``__init__``."""
        return self._momentum

    @momentum.setter
    def momentum(self, value: float) -> None:
        _validation.check_positive("momentum", value, allow_zero=True)
        if not value < 1:
            raise ValueError(f"Expected `momentum` to be in [0, 1), but got {value!r}.")
        self._momentum = value

    def forward(  # type: ignore[override]
        self,
        preds: Tensor,
        clicks: Tensor,
        positions: Tensor,
        mask: Tensor | None = None,
    ) -> Tensor:
        """Loss of ``[..., L]`` scores on 0/1 ``clicks`` of items shown at ``positions``.

        ``positions`` (integer, 0 = top, -1 = not shown) are where the logged ranking showed
        each item; ``mask`` marks real items. In training mode the biases are updated after
        the loss is computed (the loss uses the biases from before the step).
        """
        # Types and shapes: checked with or without the values (`validate_args`).
        _validation.check_preds_target(preds, clicks, target_name="clicks")
        _validation.check_mask(mask, preds.shape)
        real = _validation.real_items(clicks, mask, self.ignore_index)
        extra = _clicks.check_positions(
            positions, preds.shape, self.num_positions, real, validate_args=self.validate_args
        )
        if self.validate_args:
            extra += _clicks.check_binary("clicks", clicks, real)
        shown = positions != _clicks.NOT_SHOWN
        taken = shown if real is None else real & shown
        lists = _prepare(
            preds,
            clicks,
            taken,
            self.options,
            extra_checks=_clicks.value_checks(extra) if self.validate_args else None,
        )
        n, length = self.num_positions, preds.shape[-1]
        # Each item's bin: 1 + its position if clicked, n + 2 + its position if not. Items not
        # shown fall in bins 0 and n + 1, which weigh nothing and are dropped from the sums.
        unclicked = clicks.reshape(-1, length) <= 0
        shown_bins = positions.reshape(-1, length).long() + 1  # 0: not shown
        if real is not None:  # padded items' positions are never checked: any value
            shown_bins = torch.where(taken.reshape(-1, length), shown_bins, 0)
        bins = torch.add(shown_bins, unclicked, alpha=n + 1)
        # 1 / t+ and 1 / t- by bin (1 / inf = 0 in the bins of the items not shown).
        factors = torch.cat([self._edge, self.t_plus, self._edge, self.t_minus]).reciprocal()
        item_factor = factors.to(lists.scores.dtype)[bins]
        per_list, shares = lambda_pairs(
            lists, self.options, item_factor=item_factor, item_losses=self.training
        )
        if shares is not None:
            self._update_biases(shares, bins, shown_bins)
        return _reduce(
            per_list,
            self._lists_with_a_click(lists, shown_bins, unclicked),
            self.reduction,
            lists.leading_shape,
        )

    def _lists_with_a_click(
        self, lists: _LossInput, shown_bins: Tensor, unclicked: Tensor
    ) -> Tensor:
        """Whether each list has a click on an item that takes part: the lists ``"mean"`` counts.

        A named gain is 0 without a click and positive with one, and a named discount positive
        at the top: the ideal DCG of the items taking part is positive on exactly those lists
        (``lists.has_relevant``, no launch more). A callable gain positive at 0 makes it positive
        on a list without a click too, and a callable discount 0 at the top makes it 0 on a list
        with one click: there the clicks of the items shown (``shown_bins`` > 0) tell them apart.
        Only ``"mean"`` counts the lists.
        """
        options = self.options
        if self.reduction != "mean" or not (callable(options.gain) or callable(options.discount)):
            return lists.has_relevant
        return shown_bins.masked_fill(unclicked, 0).any(dim=-1)

    def aggregated(
        self,
        preds: Tensor,
        clicks: Tensor,
        views: Tensor,
        mask: Tensor | None = None,
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
        `forward`'s loss exactly, and so are the bias updates,
        $S^+_i = \sum_w \mathrm{clicks}_{wi} \sum_l B_l L_{wl}$ and
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
        if not isinstance(preds, Tensor) or not preds.is_floating_point():
            raise TypeError(f"Expected `preds` to be a floating tensor, but got {preds!r}.")
        length, n = preds.shape[-1], self.num_positions
        counts_shape = (*preds.shape, n)
        for name, value in (("clicks", clicks), ("views", views)):
            if not isinstance(value, Tensor) or not value.is_floating_point():
                raise TypeError(
                    f"Expected `{name}` to be a floating tensor, but got "
                    f"{getattr(value, 'dtype', type(value).__name__)}."
                )
            if tuple(value.shape) != counts_shape:
                raise ValueError(
                    f"Expected `{name}` to have shape {counts_shape} (`preds`' shape and "
                    f"`num_positions`), but got {tuple(value.shape)}."
                )
        _validation.check_mask(mask, preds.shape)  # a shape: checked with or without values
        dtype = preds.dtype
        won = clicks.reshape(-1, length, n).to(dtype)
        shown_counts = views.reshape(-1, length, n).to(dtype)
        # The items ranked: real ones that were shown (as `forward` ranks its shown items).
        real = views.reshape(-1, length, n).detach().sum(-1) > 0
        flat_mask = None if mask is None else mask.reshape(-1, length)
        if flat_mask is not None:
            real = real & flat_mask
        # The scores of the others never count: they may be anything (NaN, inf).
        scores = torch.where(real, preds.reshape(-1, length), 0)
        if self.validate_args and won.numel() > 0:
            self._check_counts(
                scores.detach(), real, won.detach(), shown_counts.detach(), flat_mask
            )
        if flat_mask is not None:  # padded counts may be anything too: selected, not multiplied
            won = torch.where(real[..., None], won, 0)
            shown_counts = torch.where(real[..., None], shown_counts, 0)
        lost = shown_counts - won
        inverse = torch.stack([self.t_plus, self.t_minus]).to(dtype).reciprocal()
        winner = won @ inverse[0]  # A_w: [N, L]
        loser = lost @ inverse[1]  # B_l
        # Current ranking: 1-based ranks, ties in order of appearance, items not ranked last.
        keys = _fast_paths.ranking_keys(scores.detach(), real)
        order = _fast_paths.stable_descending_order(keys, length)
        ranks = torch.empty_like(order).scatter_(
            -1, order, torch.arange(1, length + 1, device=order.device).expand_as(order)
        )
        kmax = length if self.k is None else min(self.k, length)
        discount = _kernels.discounts(ranks.to(dtype), self.discount).to(dtype)
        discount = torch.where(ranks <= kmax, discount, 0)
        delta = (discount[:, :, None] - discount[:, None, :]).abs()
        difference = scores[:, :, None] - scores[:, None, :]
        pair = delta * torch.nn.functional.softplus(-self.sigma * difference)  # L_wl: [N, L, L]
        per_list = torch.einsum("nw,nwl,nl->n", winner, pair, loser)
        if self.training:
            with torch.no_grad():
                plus = torch.einsum("nwi,nwl,nl->ni", won, pair, loser)
                minus = torch.einsum("nlj,nwl,nw->nj", lost, pair, winner)
                by_position = torch.stack([plus, minus], dim=1)  # [N, 2, n]: each list's S+, S-
                if self.match_exposure:  # the share of each list's sessions that show a position
                    views_by_position = (won + lost).sum(dim=1)  # [N, n]
                    top = views_by_position[:, :1]
                    shown = torch.where(top > 0, views_by_position / top.clamp(min=1e-30), 0)
                else:
                    shown = torch.ones_like(plus)
                references = by_position[:, :, :1] * shown[:, None, :]
                self._add_statistics(torch.cat([by_position, references], dim=1).sum(dim=0))
        # The lists with a click, as `forward` counts them: a positive click count on an item
        # ranked (checked counts: a click is on an item with views, and no count is negative).
        has_click = won.sum(dim=(-1, -2)) > 0
        per_list = torch.where(has_click, per_list, 0)
        return _reduce(per_list, has_click, self.reduction, preds.shape[:-1])

    @staticmethod
    def _check_counts(
        scores: Tensor, real: Tensor, clicks: Tensor, views: Tensor, mask: Tensor | None
    ) -> None:
        """`aggregated`'s value checks, each naming the argument at fault and the value found.

        The scores of the items ranked (``real``), then the counts of the real items (``mask``;
        those of an item without views too: negative views would drop it from the ranking
        unnoticed): no NaN, finite and non-negative, clicks at most views. One read-back on the
        CPU, device-side assertions elsewhere, before anything is computed or learnt.
        """
        low_pred = torch.where(real, scores, torch.inf).amin()
        high_pred = torch.where(real, scores, -torch.inf).amax()
        infinite = torch.where(low_pred == -torch.inf, low_pred, high_pred)
        counts = torch.stack([clicks, views])  # [2, N, L, n]
        if mask is not None:
            counts = counts.masked_fill(~mask[None, :, :, None], 0)
        low, high = counts.reshape(2, -1).aminmax(dim=1)  # both NaN where a count is
        found = torch.where(low < 0, low, high)
        excess = (counts[0] - counts[1]).amax()
        checks = [
            # As `forward` checks them, before anything is computed or learnt.
            (
                (low_pred == low_pred) & (high_pred == high_pred),
                low_pred,
                "Expected `preds` to contain no NaN, but found NaN scores.",
            ),
            (
                (low_pred > -torch.inf) & (high_pred < torch.inf) | (low_pred > high_pred),
                infinite,
                "Expected `preds` to be finite, but found {found}.",
            ),
        ]
        for row, name in enumerate(("clicks", "views")):
            checks += [
                (
                    low[row] == low[row],
                    low[row],
                    f"Expected `{name}` to contain no NaN, but found NaN counts.",
                ),
                (
                    (low[row] >= 0) & (high[row] < torch.inf),
                    found[row],
                    f"Expected `{name}` to be non-negative and finite, but found {{found}}.",
                ),
            ]
        checks.append(
            (
                ~(excess > 0),  # NaN (inf - inf): named by the checks above
                excess,
                "Expected `clicks` to be at most `views`, but found clicks above views by {found}.",
            )
        )
        _clicks.resolve_checks(_clicks.value_checks(checks))

    @torch.no_grad()
    def _update_biases(self, statistic: Tensor, bins: Tensor, shown_bins: Tensor) -> None:
        """Add this batch's statistics to their moving averages; update the biases.

        ``statistic`` is each item's sum of its pairs' losses divided by the other item's bias
        (its share of the debiased losses times its own bias); ``bins`` as in `forward`,
        ``shown_bins`` 1 + each item's position (0: not shown). Each list's sums by bin give its
        ``S+`` and ``S-`` per position; its top position's sums count towards the reference of
        each position it shows (`_add_statistics`). Five launches, all into one buffer.
        """
        n, rows = self.num_positions, bins.shape[0]
        # One zeroed buffer: per list [statistic or reference, S+ or S-, 1 + position], then
        # whether it shows each position; bin 0 holds the items not shown.
        buffer = statistic.new_zeros(rows, 5 * (n + 1), dtype=self.statistics.dtype)
        sums = buffer[:, : 4 * (n + 1)].view(rows, 2, 2, n + 1)
        sums[:, 0].view(rows, 2 * (n + 1)).scatter_add_(1, bins, statistic.to(sums.dtype))
        shown = buffer[:, 4 * (n + 1) :]
        if self.match_exposure:
            shown.scatter_(1, shown_bins, 1.0)
        else:
            shown.fill_(1.0)
        torch.mul(sums[:, 0, :, 1:2], shown[:, None, :], out=sums[:, 1])
        self._add_statistics(sums.sum(dim=0)[..., 1:].reshape(4, n))

    @torch.no_grad()
    def _add_statistics(self, batch: Tensor) -> None:
        r"""Sum ``batch`` (``[4, num_positions]``: S+, S-, R+, R-) over the ranks; update biases.

        Hu et al.'s closed form, $t_i = (S_i / R_i)^{1 / (p + 1)}$, where the reference
        $R_i$ is the top position's statistic summed over the lists that show position $i$
        (``match_exposure``; over every list, $R_i = S_0$, the paper's and XGBoost's form; the
        two agree when every list shows every position). The four rows are summed over the
        ranks (one all-reduce) and averaged over steps. A position with no statistic or no
        reference keeps its bias: there is nothing to estimate it from. Branch-free and in
        place: a handful of launches per step.
        """
        batch = batch.to(self.statistics.dtype)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            batch = batch.contiguous()
            dist.all_reduce(batch)
        averaged = self.statistics.lerp_(batch, 1 - self.momentum)
        statistic, reference = averaged[:2], averaged[2:]
        known = torch.minimum(statistic, reference) > 0
        estimate = (statistic / reference).pow_(1 / (1 + self.bias_norm))
        for row, bias in enumerate((self.t_plus, self.t_minus)):
            torch.where(known[row], estimate[row], bias, out=bias)

    def extra_repr(self) -> str:
        """Hyper-parameters shown by ``repr``."""
        return (
            f"num_positions={self.num_positions}, k={self.k}, sigma={self.sigma}, "
            f"bias_norm={self.bias_norm}, momentum={self.momentum}, "
            f"match_exposure={self.match_exposure}"
        )
