"""Self-FL's two-level Gaussian model on the engine: its likelihood, Eqn. 3, the posterior means.

θ_m ~ N(θ₀, σ₀²) for clients m = 1..M, then N_m observations w_{m,i} ~ N(θ_m, σ²) (the
``gaussian`` dataset, `pflpipe.data.synthetic.gaussian`). Client m's estimate z_m (its sample
mean) has variance σ_m² = σ²/N_m.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from pflpipe.engine.trainer import Batch, Context

EPS = 1e-12


class ScalarMean(nn.Module):
    """A client's parameter θ_m as a network: ŷ = θ·x, the inputs being 1 (spec model ``custom``).

    Args:
        in_shape: The input shape, (1,).
        n_classes: The output width, 1.
        init: The starting θ⁰.

    """

    head_prefixes = ("theta",)

    def __init__(self, in_shape: tuple[int, ...] = (1,), n_classes: int = 1, init: float = 0.0):
        super().__init__()
        if tuple(in_shape) != (1,) or n_classes != 1:
            raise ValueError(f"ScalarMean estimates one number from inputs of 1; got inputs of "
                             f"shape {tuple(in_shape)} and {n_classes} outputs")
        self.theta = nn.Parameter(torch.full((1,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        """Return θ·x [B, 1]."""
        return x * self.theta


@dataclass
class GaussianLikelihood(Context):
    """A context whose task loss is the negative log-likelihood Σ_i (ŷ_i − y_i)² / (2σ²).

    Summed over the batch, not averaged: one gradient step of size η on a client's whole data
    moves θ by η(θ − z_m)/σ_m², Self-FL's Eqn. 6, so lr and step counts mean what they mean in
    the paper.
    """

    task: str = "regression"
    sigma_sq: float = 1.0

    def loss(self, output: Tensor, batch: Batch) -> Tensor:
        """Σ over the batch's real samples of (ŷ − y)² / (2σ²)."""
        per_sample = (output.squeeze(-1) - batch["y"]) ** 2 / (2 * self.sigma_sq)
        return (per_sample * batch["mask"]).sum()


def fl_optimal(z: np.ndarray, sigma0_sq: float, sigma_sq: np.ndarray) -> tuple[float, np.ndarray]:
    """Return the paper's global-optimal θ^(G) and FL-optimal θ_m^(FL) (Eqns. 2–3).

    With w_m = (σ₀² + σ_m²)⁻¹: θ^(G) = Σ w_m z_m / Σ w_m, the posterior mean of θ₀ (flat prior).
    θ_m^(FL) = (z_m/σ_m² + Σ_{k≠m} w_k z_k) / (1/σ_m² + Σ_{k≠m} w_k) is Eqn. 3's estimator:
    client m takes its own parameter as the root (θ_m = θ₀), so the peers' estimates inform θ_m
    with precision W_{−m} = Σ_{k≠m} w_k. It is *not* the posterior mean of θ_m under the
    two-level model (`posterior_means`), and it is what Self-FL's ℓ_m steps from the
    leave-one-out start reach (Eqns. 7–8).

    >>> g, fl = fl_optimal(np.array([0.0, 1.0, 2.0]), 1.0, np.array([1.0, 1.0, 1.0]))
    >>> round(g, 12), fl.tolist()   # client 0: (0 + (1 + 2)/2) / (1 + 1) = 0.75
    (1.0, [0.75, 1.0, 1.25])
    """
    z, sigma_sq = np.asarray(z, dtype=np.float64), np.asarray(sigma_sq, dtype=np.float64)
    w = 1.0 / (sigma0_sq + sigma_sq)
    others, others_sum = w.sum() - w, (w * z).sum() - w * z
    return float((w * z).sum() / w.sum()), (z / sigma_sq + others_sum) / (1 / sigma_sq + others)


def posterior_means(z: np.ndarray, sigma0_sq: float, sigma_sq: np.ndarray) -> np.ndarray:
    """Return every client's exact posterior mean E[θ_m | z_1..z_M] of the two-level model.

    The peers k ≠ m give θ₀ | z_{−m} ~ N(θ_{−m}, 1/W_{−m}) (θ_{−m} their w-weighted mean), hence
    θ_m | z_{−m} ~ N(θ_{−m}, σ₀² + 1/W_{−m}), and with z_m: E[θ_m | z] = (z_m/σ_m² + θ_{−m}/τ_m) /
    (1/σ_m² + 1/τ_m), τ_m = σ₀² + 1/W_{−m}. Equivalently (z_m/σ_m² + θ^(G)/σ₀²)/(1/σ_m² + 1/σ₀²).
    Eqn. 3's θ_m^(FL) (`fl_optimal`) has the peers' precision W_{−m} in place of 1/τ_m: it pulls
    a client towards the others more whenever σ₀² > 0.

    >>> posterior_means(np.array([0.0, 1.0, 2.0]), 1.0, np.array([1.0, 1.0, 1.0])).tolist()
    [0.5, 1.0, 1.5]

    (client 0: θ_{−0} = 1.5, τ = 1 + 1 = 2, (0 + 1.5/2)/(1 + 1/2) = 0.5; or θ^(G) = 1:
    (0 + 1/1)/(1 + 1) = 0.5.)
    """
    z, sigma_sq = np.asarray(z, dtype=np.float64), np.asarray(sigma_sq, dtype=np.float64)
    w = 1.0 / (sigma0_sq + sigma_sq)
    others = w.sum() - w
    loo = ((w * z).sum() - w * z) / others
    tau = sigma0_sq + 1.0 / others
    return (z / sigma_sq + loo / tau) / (1 / sigma_sq + 1 / tau)


def local_steps(lr: Tensor, sigma_sq: Tensor, s_minus: Tensor, n: Tensor, cap: int) -> Tensor:
    """Self-FL's ℓ_m (Eqn. 8) [C]: ⌈ln ρ_m / ln(1 − a_m)⌉ clipped to [1, cap], a_m = η/(n_m σ_m²).

    ρ_m = S_{−m}/(σ_m⁻² + S_{−m}) is the share of the distance from the start to the local optimum
    z_m that θ_m^(FL) leaves (Eqns. 7–8); a_m is what one step of lr η removes of it. A client
    with a_m ≥ 1 (one step reaches or overshoots z_m) takes one step.

    Why n_m. Eqn. 5's loss is client m's negative log-likelihood summed over its N_m samples,
    L_m(θ) = Σ_i ℓ_i(θ), whose curvature at z_m is the Fisher information N_m/v_m² = σ_m⁻² (App.
    D: σ_m² = v_m²/N_m); a step η on it contracts by η/σ_m² (Eqn. 6). Deep-learning trainers, and
    this engine, step on the batch mean of ℓ_i, in expectation L_m/N_m, whose curvature is
    σ_m⁻²/N_m: a step of lr η on it is a step η/N_m on L_m, so a_m = η/(N_m σ_m²) = η/v_m² (the
    batch size drops out). Pass n_m = N_m for a batch-mean loss, n_m = 1 for the summed one (the
    Gaussian likelihood above). ρ_m, a ratio of precisions, does not change.

    The variances are traces over the d parameters (the paper's σ̂², one scalar per client):
    ρ_m is unchanged by a common factor, and as the variance along the path from θ^INIT to z_m
    the trace is an upper bound (an isotropic model would have σ̂²/d), so a_m is the least
    contraction per step the estimate allows and ℓ_m the most steps, which ℓ_max (§4.2) caps.
    On digits (σ̂_m² ≈ 0.012, η = 0.05, N_m 30–120) a_m = 0.035–0.14, where η/σ̂_m² ≈ 4 gave
    ℓ_m = 1 in every client-round.

    >>> local_steps(torch.tensor([0.05]), torch.tensor([0.01]), torch.tensor([200.0]),
    ...             torch.tensor([50.0]), 40).tolist()  # ρ = 2/3, a = 0.1: ⌈0.405/0.105⌉
    [4]
    """
    s2, s_minus = sigma_sq.double().clamp_min(EPS), s_minus.double()
    rho = (s_minus / (1 / s2 + s_minus)).clamp(EPS, 1 - EPS)
    rate = lr.double() / (n.double() * s2)
    below_one = torch.where(rate < 1, rate, 0.5)
    ell = torch.ceil(torch.log(rho) / torch.log1p(-below_one))
    return torch.where(rate < 1, ell, 1.0).clamp(1, cap).long()
