from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.self_fl_params import SelfFLParams


class ActPerFLParams(SelfFLParams):
    """ActPerFL (Chen et al.): Self-FL's rules as printed in the short version."""

    name: Literal["actperfl"]  # type: ignore[assignment]
    peer_set: Literal["active", "all"] = Field(
        "all",
        description="Whose precisions Σ_{k≠m} (σ̂₀² + σ̂_k²)⁻¹ sums: every client's latest known "
        "value (ActPerFL's Eqns. 9–10 sum over all M clients; unknown ones imputed by the mean "
        "of the known), or the round's clients only.",
    )
    smoothing: bool = Field(
        False,
        description="ActPerFL's Algorithm 1 sets the global model to the round's aggregate "
        "(Eqn. 10); true applies Self-FL's smoothing θ ← (1 − C)·θ + C·θ̂.",
    )
