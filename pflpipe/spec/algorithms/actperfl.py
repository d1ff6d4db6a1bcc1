from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.self_fl import SelfFLParams


class ActPerFLParams(SelfFLParams):
    """ActPerFL (Chen et al.): Self-FL's rules as printed in the short version, no smoothing."""

    name: Literal["actperfl"]  # type: ignore[assignment]
    smoothing: bool = Field(
        False,
        description="ActPerFL's Algorithm 1 sets the global model to the round's aggregate "
        "(Eqn. 10); true applies Self-FL's smoothing θ ← (1 − C)·θ + C·θ̂.",
    )
