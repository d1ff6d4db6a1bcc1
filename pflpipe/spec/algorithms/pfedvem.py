from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.base import FederatedParams, Rounds


class PFedVemParams(FederatedParams):
    """pFedVEM (Zhu et al. 2023): a Gaussian head per client, confidence-weighted by variational EM.

    The base follows the entry's (or the federation's) lr, batch size and local epochs, as FedAvg's;
    the head has its own full-batch steps. federation.client_fraction is not used: `participation`
    says which clients reach the server.
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
    participation: float = Field(
        0.1, gt=0, le=1,
        description="s: probability that a client's update reaches the server in a round.",
    )
    train_all_clients: bool = Field(
        True,
        description="Every client trains every round and each reaches the server with "
        "probability s (Algorithm 1). false: only round(s·J) sampled clients train and send "
        "(cheaper, not the paper's protocol).",
    )
    min_participants: int = Field(
        1, ge=1,
        description="With train_all_clients, arrivals are redrawn until at least this many (the "
        "paper's code uses 2).",
    )
    predict: Literal["mean", "mc"] = Field(
        "mean",
        description="Personalized prediction: the posterior-mean head (the paper's code) or the "
        "Monte-Carlo predictive average over K sampled heads.",
    )
    pm_base: Literal["local", "global"] = Field(
        "local",
        description="Base of the personalized model: the client's locally trained base (the "
        "paper's code; with train_all_clients false, from the client's last round) or the "
        "aggregated global base.",
    )

    def rounds_of(self, federation) -> Rounds:
        """Every client each round (train_all_clients), else a fraction `participation`."""
        rounds = super().rounds_of(federation)
        return rounds._replace(client_fraction=1.0 if self.train_all_clients
                               else self.participation)
