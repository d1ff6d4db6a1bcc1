"""The registry of algorithm classes, filled by `@register` as `pflpipe.algorithms` is imported."""

from typing import TYPE_CHECKING

from pflpipe.spec.algorithms import algorithm_name

if TYPE_CHECKING:
    from pflpipe.algorithms.base import Algorithm

REGISTRY: dict[str, type["Algorithm"]] = {}


def register(cls: type["Algorithm"]) -> type["Algorithm"]:
    """Class decorator: make the algorithm available under its params model's `name`."""
    name = algorithm_name(cls.params_type())
    if name is None:
        raise TypeError(f"{cls.__name__}: its params model declares no `name: Literal[...]`")
    REGISTRY[name] = cls
    return cls
