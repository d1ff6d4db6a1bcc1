"""Self-FL's two-level Gaussian model on the engine: its likelihood and its posterior means.

θ_m ~ N(θ₀, σ₀²) for clients m = 1..M, then N_m observations w_{m,i} ~ N(θ_m, σ²) (the
``gaussian`` dataset, `pflpipe.data.synthetic.gaussian`). Client m's estimate z_m (its sample
mean) has variance σ_m² = σ²/N_m.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from pflpipe.engine.trainer import Batch, Context


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


def posterior_means(z: np.ndarray, sigma0_sq: float, sigma_sq: np.ndarray
                    ) -> tuple[float, np.ndarray]:
    """Return the global-optimal θ^(G) and every client's FL-optimal θ_m^(FL) (Eqns. 2–3).

    With w_m = (σ₀² + σ_m²)⁻¹: θ^(G) = Σ w_m z_m / Σ w_m, and client m, taking its own
    parameter as the root, θ_m^(FL) = (z_m/σ_m² + Σ_{k≠m} w_k z_k) / (1/σ_m² + Σ_{k≠m} w_k).

    >>> g, fl = posterior_means(np.array([0.0, 1.0, 2.0]), 1.0, np.array([1.0, 1.0, 1.0]))
    >>> round(g, 12), fl.tolist()   # client 0: (0 + (1 + 2)/2) / (1 + 1) = 0.75
    (1.0, [0.75, 1.0, 1.25])
    """
    z, sigma_sq = np.asarray(z, dtype=np.float64), np.asarray(sigma_sq, dtype=np.float64)
    w = 1.0 / (sigma0_sq + sigma_sq)
    others, others_sum = w.sum() - w, (w * z).sum() - w * z
    return float((w * z).sum() / w.sum()), (z / sigma_sq + others_sum) / (1 / sigma_sq + others)
