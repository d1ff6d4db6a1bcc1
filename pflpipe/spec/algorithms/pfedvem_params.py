from typing import Literal

from pydantic import Field, model_validator

from pflpipe.spec.algorithms.params import FederatedParams


class PFedVemParams(FederatedParams):
    """pFedVEM (Zhu et al. 2023): a Gaussian head per client, confidence-weighted by variational EM.

    The base follows the entry's (or the federation's) lr, batch size and local epochs, as FedAvg's;
    the head has its own full-batch steps. Every client trains each round (Algorithm 1) unless the
    entry's `client_fraction` samples a share, the spelling every federated algorithm takes.
    """

    name: Literal["pfedvem"]
    mc_samples: int = Field(
        5, ge=1,
        description="K: Monte-Carlo samples of the head per step (and for 'mc' prediction).",
    )
    head_steps: int = Field(
        10, ge=1, description="R: full-batch steps on the head's posterior (the E-step) per round."
    )
    head_lr: float = Field(
        0.001, gt=0,
        description="η: learning rate of the head's E-step (with the federation's optimizer).",
    )
    init_var: float = Field(
        1.0, gt=0, description="Initial posterior variance σ₀² of every head weight (= ρ₀²)."
    )
    confidence: Literal["full", "uncertainty", "deviation"] = Field(
        "full",
        description="τ_j = d / (tr Σ_j + ‖μ_j − w‖²) ('full', Eq. 8), or one term only, the "
        "ablations of Tables 2-3: 'uncertainty' d / tr Σ_j, 'deviation' d / ‖μ_j − w‖² (the full "
        "formula while μ_j = w; a head that barely moves gets a huge τ, which needs a small "
        "head_lr).",
    )
    client_fraction: float | None = Field(
        1.0, gt=0, le=1,
        description="Fraction of clients that train each round: 1 (the default), every client "
        "(Algorithm 1), each update reaching the server with probability `participation`; less, "
        "a sampled share that all send (cheaper, not the paper's protocol; e.g. the "
        "participation s); null: federation.client_fraction.",
    )
    participation: float = Field(
        0.1, gt=0, le=1,
        description="s: probability that a client's update reaches the server in a round when "
        "every client trains.",
    )
    min_participants: int = Field(
        1, ge=1,
        description="When every client trains, arrivals are redrawn until at least this many "
        "(the paper's code uses 2).",
    )
    predict: Literal["mean", "mc"] = Field(
        "mean",
        description="Personalized prediction: the posterior-mean head (the paper's code) or the "
        "Monte-Carlo predictive average over K sampled heads.",
    )
    pm_base: Literal["local", "global"] = Field(
        "local",
        description="Base of the personalized model: the client's locally trained base (the "
        "paper's code; with a sampled client_fraction, from the client's last round) or the "
        "aggregated global base.",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_flag(cls, data):
        if isinstance(data, dict) and "train_all_clients" in data:
            raise ValueError(
                "train_all_clients was replaced by client_fraction, the one spelling every "
                "federated algorithm takes: client_fraction: 1 (every client trains each round, "
                "Algorithm 1; the default) or client_fraction: <share> (a sampled share; "
                "train_all_clients: false was client_fraction: <participation>, e.g. 0.1)")
        return data

    def saved_beside(self, model: int, head: int | None, features: int) -> int:
        """The head's spread (every weight's where the head is not known)."""
        return model if head is None else head
