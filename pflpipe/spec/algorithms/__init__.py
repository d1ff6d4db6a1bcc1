"""Parameters of every algorithm, one params model per module, found by name.

A module ``pflpipe/spec/algorithms/<name>.py`` defines the params model of the algorithm `<name>`
(a subclass of `Params` with ``name: Literal["<name>"]``). Importing this package imports every
such module and derives from them what the rest of pflpipe reads: the spec's discriminated union
`Algorithm`, `PARAMS` (name → model) and `PERSONALIZE`, the algorithms the `personalize` stage
runs. Adding an algorithm therefore touches its params module and its algorithm file only.
"""

import importlib
import pkgutil
from typing import Annotated, Union

from pydantic import Field

from pflpipe.spec.algorithms.base import FederatedParams, Params, Rounds, StandaloneParams


def _discover() -> dict[str, type[Params]]:
    found: dict[str, type[Params]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Params)
                    and value.__module__ == module.__name__ and "name" in value.model_fields):
                found[value.model_fields["name"].annotation.__args__[0]] = value
    return dict(sorted(found.items()))


#: Every algorithm's params model, by algorithm name.
PARAMS: dict[str, type[Params]] = _discover()
globals().update({cls.__name__: cls for cls in PARAMS.values()})

#: One entry of the spec's `personalization` list: the params model its `name` selects.
Algorithm = Annotated[Union[tuple(PARAMS.values())], Field(discriminator="name")]  # noqa: UP007

#: Algorithms that run in the `personalize` stage (the others have stages of their own).
PERSONALIZE = tuple(name for name, cls in PARAMS.items() if cls.stage == "personalize")

__all__ = ["PARAMS", "PERSONALIZE", "Algorithm", "FederatedParams", "Params", "Rounds",
           "StandaloneParams", *(cls.__name__ for cls in PARAMS.values())]
