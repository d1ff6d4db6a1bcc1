from typing import ClassVar, Literal

from pflpipe.spec.algorithms.params import Params


class PersFLParams(Params):
    """PersFL: per-client optimal teachers then λ/T grid-search distillation.

    Configured by the spec's `teachers` and `distillation` sections.
    """

    stage: ClassVar[str] = "distill_grid_search"

    name: Literal["persfl"]
