"""Personalization algorithms.

Each file states only how its algorithm differs from FedAvg (`pflpipe.algorithms.base`); importing
this package registers them all.
"""

from pflpipe.algorithms import apfl, ditto, fedavg_ft, fedper, local, per_fedavg, pfedme  # noqa: F401
from pflpipe.algorithms.base import REGISTRY, Algorithm, Phase, register
from pflpipe.algorithms.fedavg import FedAvg

__all__ = ["REGISTRY", "Algorithm", "FedAvg", "Phase", "build", "register"]


def build(entry, *, head: frozenset[str], federation) -> Algorithm:
    """The algorithm a personalization entry of the spec names, with its resolved lr/epochs."""
    cls = REGISTRY[entry.name]
    local_epochs = getattr(entry, "local_epochs", None) or federation.local_epochs
    return cls(entry, head=head, lr=entry.lr or federation.lr, local_epochs=local_epochs)
