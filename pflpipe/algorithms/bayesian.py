"""Diagonal-Gaussian weights, shared by pFedVEM and pFedBayes (not an algorithm itself).

A Gaussian q = N(μ, diag σ²) over some of a network's parameters is held as two groups with the
same keys: its *mean* μ and its *spread* π, with σ = softplus(π) = log(1 + e^π) — the
parameterisation of both papers, which keeps σ positive without a constraint. Samples are
reparameterised, w = μ + σ ⊙ ε with ε from the engine's noise (`ctx.normal`), so gradients reach μ
and π and a batched run draws exactly what a sequential one draws.
"""

import math
from collections.abc import Mapping

import torch
from torch import Tensor
from torch.nn import functional as F

from pflpipe.engine.tree import Group


def spread_of(std: float) -> float:
    """The spread π with softplus(π) = σ (π = σ from 20 on, where softplus is the identity).

    >>> round(spread_of(1.0), 4), spread_of(25.0)
    (0.5413, 25.0)
    """
    return std if std >= 20 else math.log(math.expm1(std))


def constant_spread(like: Mapping[str, Tensor], std: float) -> Group:
    """A spread group giving every entry of `like` the standard deviation `std`."""
    return {key: torch.full_like(value, spread_of(std)) for key, value in like.items()}


def std(spread: Mapping[str, Tensor], bounds: tuple[float, float] | None = None) -> Group:
    """σ = softplus(π) of every entry, clamped to `bounds` (σ_min, σ_max) when given."""
    if bounds is None:
        return {key: F.softplus(value) for key, value in spread.items()}
    return {key: F.softplus(value).clamp(*bounds) for key, value in spread.items()}


def detached(group: Mapping[str, Tensor]) -> Group:
    """The group without gradients (held fixed in an objective)."""
    return {key: value.detach() for key, value in group.items()}


def sample(ctx, key: Tensor, mean: Mapping[str, Tensor], spread: Mapping[str, Tensor],
           draw: int = 0) -> Group:
    """One reparameterised draw w = μ + softplus(π) ⊙ ε; draws with different `draw` differ.

    ε is one ``ctx.normal(key, (n,), salt=draw)`` over all n entries, cut into the keys in sorted
    order (one call: the noise is most of the cost of sampling a small head).
    """
    names = sorted(mean)
    noise = ctx.normal(key, (sum(mean[name].numel() for name in names),), salt=draw)
    parts = noise.split([mean[name].numel() for name in names])
    return {name: mean[name] + F.softplus(spread[name]) * part.view(mean[name].shape)
            for name, part in zip(names, parts, strict=True)}


def gaussian_kl(mean: Mapping[str, Tensor], std: Mapping[str, Tensor],
                prior_mean: Mapping[str, Tensor], prior_std: Mapping[str, Tensor] | Tensor
                ) -> Tensor:
    """KL(N(μ, diag σ²) ‖ N(m, diag s²)) = Σ_i log(s_i / σ_i) + (σ_i² + (μ_i − m_i)²) / 2s_i² − ½.

    `prior_std` is a group with the keys of `mean`, or one scalar (an isotropic prior s² I).

    >>> one, zero = {"w": torch.tensor([1.0])}, {"w": torch.tensor([0.0])}
    >>> float(gaussian_kl(one, one, zero, torch.tensor(2.0)))  # log 2 + (1 + 1)/8 − ½
    0.4431471824645996
    """
    def term(name: str) -> Tensor:
        s = prior_std[name] if isinstance(prior_std, Mapping) else prior_std
        sigma, mu = std[name], mean[name]
        return (torch.log(s) - torch.log(sigma)
                + (sigma ** 2 + (mu - prior_mean[name]) ** 2) / (2 * s ** 2) - 0.5).sum()

    return sum(term(name) for name in mean)


def expected_loss(ctx, params: Mapping[str, Tensor], mean: Mapping[str, Tensor],
                  spread: Mapping[str, Tensor], batch, samples: int) -> Tensor:
    """(1/K) Σ_k f(w_k) on the batch, the Gaussian entries of w_k drawn from q, the rest `params`.

    f is the task loss (mean over the batch's real samples), w_k's draw is `sample`'s draw k.
    """
    total = sum(ctx.task_loss({**params, **sample(ctx, batch["key"], mean, spread, k)}, batch)
                for k in range(samples))
    return total / samples


def predict(ctx, model: Mapping[str, Mapping[str, Tensor]], x: Tensor, key: Tensor, how: str,
            samples: int) -> Tensor:
    """Outputs of a scored Bayesian model ``{"model": means, "spread": spreads}``.

    ``how="mean"``: the network at the posterior mean. ``how="mc"``: the Bayesian predictive
    (1/K) Σ_k softmax(f(x; w_k)) as log-probabilities (the mean output for regression), w_k drawn
    from the spread's entries with the evaluation `key`.
    """
    params = model["model"]
    if how == "mean":
        return ctx.forward(params, x)
    gaussian = {name: params[name] for name in model["spread"]}
    outputs = torch.stack([ctx.forward({**params, **sample(ctx, key, gaussian, model["spread"], k)},
                                       x) for k in range(samples)])
    if ctx.task == "regression":
        return outputs.mean(0)
    return torch.logsumexp(F.log_softmax(outputs, -1), 0) - math.log(samples)
