from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import FederatedParams
from pflpipe.spec.strict_section import Section


class OracleVariances(Section):
    """Known variances of the two-level Gaussian model (Self-FL §4.1, synthetic data).

    Client m's intra-client variance is σ_m² = σ² / N_m with N_m its training samples.
    """

    sigma0_sq: float = Field(ge=0, description="Inter-client variance σ₀².")
    sigma_sq: float = Field(gt=0, description="Variance σ² of one observation.")


class SelfFLParams(FederatedParams):
    """Self-FL (Chen et al. 2022): uncertainty-driven initialisation, local steps, aggregation."""

    name: Literal["self_fl"]
    init: Literal["leave_one_out", "global"] = Field(
        "leave_one_out",
        description="Round start: the global model minus the client's own contribution (Eqn. 10), "
        "or FedAvg's global model (Fig. 2b ablation).",
    )
    steps: Literal["adaptive", "fixed"] = Field(
        "adaptive",
        description="Local steps: ℓ_m from the variances and the lr (Eqn. 8), or FedAvg's "
        "local_epochs (Fig. 2b ablation).",
    )
    aggregation: Literal["uncertainty", "sample_size"] = Field(
        "uncertainty",
        description="Server weights: 1/(σ̂₀² + σ̂_m²) (Eqn. 11), or FedAvg's n_m/n (Fig. 2b "
        "ablation).",
    )
    loss_reduction: Literal["mean", "sum"] = Field(
        "mean",
        description="How the loss the client steps on is reduced over its samples, which sets "
        "Eqn. 8's contraction per step: `mean` (the engine's task loss, averaged over the batch): "
        "η/(N_m σ̂_m²), one step of lr η being a step η/N_m on the client's negative "
        "log-likelihood summed over its N_m samples; `sum` (that summed likelihood, Eqn. 5, as "
        "the two-level Gaussian data's loss is): η/σ̂_m².",
    )
    max_local_steps: int = Field(
        40, ge=1, description="ℓ_max: the most local steps ℓ_m may take (§4.2 uses 40)."
    )
    min_history: int = Field(
        2, ge=2,
        description="Participations a client must have recorded before its variance σ̂_m² is "
        "used; until then it starts from the global model and takes FedAvg's local steps.",
    )
    peer_set: Literal["active", "all"] = Field(
        "active",
        description="Whose precisions Σ_{k≠m} (σ̂₀² + σ̂_k²)⁻¹ sums: the round's clients (only "
        "they report σ̂_k², Alg. 2), or every client's latest known value (unknown ones imputed "
        "by the mean of the known).",
    )
    smoothing: bool = Field(
        True,
        description="Under client sampling, move the global model by the activity rate C: "
        "θ ← (1 − C)·θ + C·θ̂ (§4.1); a no-op when every client takes part.",
    )
    augmented: bool = Field(
        False,
        description="Algorithm 2: estimate both variances from each round's local optimum (the "
        "personal model trained `augmented_epochs` further) instead of the personal model.",
    )
    augmented_epochs: int = Field(
        5, ge=1, description="Extra local epochs that approximate the local optimum (Alg. 2)."
    )
    oracle: OracleVariances | None = Field(
        None,
        description="Use known variances (synthetic two-level Gaussian data) instead of "
        "estimating them from the models.",
    )
