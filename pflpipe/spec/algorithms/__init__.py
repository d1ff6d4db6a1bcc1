"""Parameters of every algorithm, one params model per module, found by name.

A module ``pflpipe/spec/algorithms/<name>_params.py`` defines the params model of the algorithm
`<name>` (a subclass of `Params` with ``name: Literal["<name>"]``). Importing this package imports
every such module and derives from them what the rest of pflpipe reads: the spec's discriminated
union `PersonalizationEntry`, `PARAMS` (name → model) and `PERSONALIZE`, the algorithms the
`personalize` stage runs. Adding an algorithm therefore touches its params module and its algorithm
file only.
"""

import importlib
import pkgutil
from typing import Annotated, Union

from pydantic import Field

from pflpipe.spec.algorithms.params import (
    FederatedParams,
    Params,
    Rounds,
    StandaloneParams,
    algorithm_name,
)

#: The params module of the algorithm `<name>` is ``<name>_params.py`` (its class is in
#: ``pflpipe/algorithms/<name>.py``).
PARAMS_SUFFIX = "_params"


def _discover() -> tuple[dict[str, type[Params]], dict[str, str]]:
    """Every well-formed params model by name, and what is wrong with each malformed module.

    A malformed module is left out of the spec's union (so it cannot break every other spec);
    a spec naming it gets the problem as its error (`pflpipe.spec.registration`).
    """
    found: dict[str, type[Params]] = {}
    broken: dict[str, str] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name != "params":
            name = info.name.removesuffix(PARAMS_SUFFIX)
            module = importlib.import_module(f"{__name__}.{info.name}")
            models, problem = params_models(name, vars(module).values(), module.__name__)
            found |= models
            if problem:
                broken[name] = problem
    return dict(sorted(found.items())), broken


def params_models(name: str, values, module: str) -> tuple[dict[str, type[Params]], str | None]:
    """The params models among `values` (defined in `module`, the params module of `name`).

    Returns them by algorithm name, and what is wrong with the module (None if nothing is).
    """
    models = [value for value in values
              if isinstance(value, type) and issubclass(value, Params)
              and value.__module__ == module and "name" in value.model_fields]
    where = f"pflpipe/spec/algorithms/{name}{PARAMS_SUFFIX}.py"
    fix = f'`name: Literal["{name}"]`'
    if not models:
        return {}, (f"{where} defines no params model; define a subclass of FederatedParams "
                    f"(or StandaloneParams) with {fix}")
    found, problem = {}, None
    for model in models:
        if (tag := algorithm_name(model)) is not None:
            found[tag] = model
        else:
            got = model.model_fields["name"].annotation
            problem = (f"{model.__name__}.name is declared as {getattr(got, '__name__', got)}; "
                       f"declare it {fix} in {where}")
    return found, problem


#: Every algorithm's params model, by algorithm name; and the modules whose params model is
#: malformed, by module name: what is wrong and how to fix it.
PARAMS, BROKEN = _discover()
globals().update({cls.__name__: cls for cls in PARAMS.values()})

#: One entry of the spec's `personalization` list: the params model its `name` selects.
PersonalizationEntry = Annotated[Union[tuple(PARAMS.values())], Field(discriminator="name")]  # noqa: UP007

#: Algorithms that run in the `personalize` stage (the others have stages of their own).
PERSONALIZE = tuple(name for name, cls in PARAMS.items() if cls.stage == "personalize")

__all__ = ["BROKEN", "PARAMS", "PERSONALIZE", "FederatedParams", "Params", "PersonalizationEntry",
           "Rounds", "StandaloneParams", "algorithm_name",
           *(cls.__name__ for cls in PARAMS.values())]
