"""Personalization algorithms.

Each module states only how its algorithm differs from FedAvg (`pflpipe.algorithms.algorithm`) and
registers it under its params model's name; importing this package imports (and so registers)
every module in it.
"""

import importlib
import pkgutil

from pflpipe.algorithms.algorithm import REGISTRY, Algorithm, Phase, Round, register
from pflpipe.algorithms.fedavg import FedAvg
from pflpipe.engine.optim import ServerOptimizerConfig

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "Algorithm", "FedAvg", "Phase", "Round", "build", "register"]


def build(entry, *, head: frozenset[str], federation) -> Algorithm:
    """The algorithm a personalization entry of the spec names, ready to run.

    It gets its resolved lr and epochs, and the federation's server optimizer (which FedAvg's
    server rule applies).
    """
    if entry.name not in REGISTRY:
        raise KeyError(f"no algorithm is registered under {entry.name!r} (registered: "
                       f"{sorted(REGISTRY)}); its module in pflpipe/algorithms/ must decorate "
                       "its class with @register")
    return REGISTRY[entry.name](
        entry, head=head, lr=entry.lr or federation.lr,
        local_epochs=entry.rounds_of(federation).local_epochs,
        server_optimizer=ServerOptimizerConfig.from_spec(federation.server_optimizer))
