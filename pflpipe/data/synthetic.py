"""Synthetic federated datasets whose clients are natural groups.

- FedProx / pFedMe Synthetic(α, β) (Li et al., MLSys 2020, §5.1): client k draws
  u_k ~ N(0, α), W_k ~ N(u_k, 1) [d × C], b_k ~ N(u_k, 1) [C], B_k ~ N(0, β), v_k ~ N(B_k, 1) [d];
  its samples are x ~ N(v_k, Σ) with Σ = diag(j^-1.2) and y = argmax(W_kᵀx + b_k). Sizes are
  ⌊LogNormal(mean, σ)⌋ + min_samples. Synthetic-IID shares one W, b ~ N(0, 1) and v = 0. α and β
  are variances, as in the paper (the FedProx code passes them as standard deviations).
- Self-FL's two-level Gaussian data (Chen et al., 2022, §4.1): θ_m ~ N(θ₀, σ₀²), then
  N_m ~ U{n_min..n_max} observations ~ N(θ_m, σ²). A regression task with constant input 1.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Generated:
    """Samples with their client group.

    Attributes:
        x: [N, d] float32 features.
        y: [N] int64 labels (classification) or float32 targets (regression).
        groups: [N] int64 client of each sample.
        truth: per-client generating parameters (e.g. θ_m), for reference.

    """

    x: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    truth: dict[str, list[float]]


def synthetic(n_clients: int, rng: np.random.Generator, *, alpha: float = 0.5, beta: float = 0.5,
              dimension: int = 60, n_classes: int = 10, iid: bool = False,
              mean_samples: float = 4.0, sigma_samples: float = 2.0, min_samples: int = 50
              ) -> Generated:
    """Generate Synthetic(α, β) (or Synthetic-IID) with `n_clients` clients."""
    sizes = rng.lognormal(mean_samples, sigma_samples, n_clients).astype(np.int64) + min_samples
    covariance = np.arange(1, dimension + 1, dtype=np.float64) ** -1.2
    model_means = rng.normal(0.0, np.sqrt(alpha), n_clients)
    feature_means = rng.normal(0.0, np.sqrt(beta), n_clients)
    shared_w = rng.normal(0.0, 1.0, (dimension, n_classes))
    shared_b = rng.normal(0.0, 1.0, n_classes)
    xs, ys = [], []
    for client in range(n_clients):
        if iid:
            w, b, v = shared_w, shared_b, np.zeros(dimension)
        else:
            w = rng.normal(model_means[client], 1.0, (dimension, n_classes))
            b = rng.normal(model_means[client], 1.0, n_classes)
            v = rng.normal(feature_means[client], 1.0, dimension)
        x = v + rng.standard_normal((sizes[client], dimension)) * np.sqrt(covariance)
        xs.append(x.astype(np.float32))
        ys.append(np.argmax(x @ w + b, axis=1).astype(np.int64))
    return Generated(
        x=np.concatenate(xs), y=np.concatenate(ys),
        groups=np.repeat(np.arange(n_clients, dtype=np.int64), sizes),
        truth={"model_mean": model_means.tolist(), "feature_mean": feature_means.tolist()},
    )


def gaussian(n_clients: int, rng: np.random.Generator, *, theta0: float = 1.6,
             sigma0_sq: float = 1.0, sigma_sq: float = 0.1, n_min: int = 10, n_max: int = 200
             ) -> Generated:
    """Generate Self-FL's two-level Gaussian observations with `n_clients` clients."""
    theta = rng.normal(theta0, np.sqrt(sigma0_sq), n_clients)
    sizes = rng.integers(n_min, n_max, size=n_clients, endpoint=True)
    groups = np.repeat(np.arange(n_clients, dtype=np.int64), sizes)
    y = (theta[groups] + rng.normal(0.0, np.sqrt(sigma_sq), len(groups))).astype(np.float32)
    return Generated(x=np.ones((len(y), 1), dtype=np.float32), y=y, groups=groups,
                     truth={"theta": theta.tolist()})
