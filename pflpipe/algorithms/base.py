"""The algorithm extension point.

An algorithm says only how it differs from FedAvg; the engine (`pflpipe.engine.federation`) owns
every loop.

A client's state is a tree of named groups (see `pflpipe.engine.tree`): ``"model"`` is the
network it trains and (partly) sends; algorithms add groups such as Ditto's ``"personal"``. The
hooks, each with its FedAvg default:

=================  ===========================================================  ===================
hook               defines                                                      FedAvg default
=================  ===========================================================  ===================
``phases``         local training: which groups, which objective, how long      train ``model``
``local_objective``the loss one client minimises (one member, pure)              task loss
``is_payload``     which ``model`` keys are sent and aggregated                  every key
``aggregate``      how the server combines payloads                              mean weighted n_k/n
``kept``           groups that survive rounds per client, never aggregated       none
``personalized``   which of a client's models is scored as "personalized"       the global model
=================  ===========================================================  ===================

Hooks that see one client's tensors (``receive``, objectives, ``predict``) are pure tensor
functions: the engine vmaps them over clients. They write nothing to ``self``, call no
``.item()`` and branch on no tensor value.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

import torch
from torch import Tensor

from pflpipe.engine.tree import Group, Tree, merge
from pflpipe.spec.algorithms import Params

P = TypeVar("P", bound=Params)

REGISTRY: dict[str, type["Algorithm"]] = {}


def register(cls: type["Algorithm"]) -> type["Algorithm"]:
    """Class decorator: make the algorithm available under its params model's `name`."""
    name = cls.params_type().model_fields["name"].annotation.__args__[0]
    REGISTRY[name] = cls
    return cls


@dataclass(frozen=True)
class Phase:
    """One stretch of local training in a round."""

    train: tuple[str, ...] = ("model",)   # groups that receive gradients
    objective: str = "local_objective"    # name of the algorithm's objective method
    epochs: int | None = None             # passes over the client's data; the round default if None
    steps: int | None = None              # a fixed number of steps instead of epochs
    lr: float | None = None               # the algorithm's lr if None
    group_lr: Mapping[str, float] = field(default_factory=dict)  # per-group overrides
    batches_per_step: int = 1             # mini-batches each step draws (Per-FedAvg: 2 or 3)


class Algorithm(Generic[P]):
    """FedAvg. Subclasses override only the hooks in which they differ."""

    kept: ClassVar[tuple[str, ...]] = ()   # groups carried over rounds per client
    predict_with: ClassVar[str] = "model"  # group scored by the default `predict`

    def __init__(self, params: P, *, head: frozenset[str], lr: float, local_epochs: int):
        self.params, self.head, self.lr, self.local_epochs = params, head, lr, local_epochs

    @classmethod
    def params_type(cls) -> type[Params]:
        """The params model this algorithm is configured by."""
        return cls.__orig_bases__[0].__args__[0]  # type: ignore[attr-defined]

    # ---- server side ------------------------------------------------------------------------
    def is_payload(self, key: str) -> bool:
        """Whether `model[key]` is sent to the server and aggregated."""
        return True

    def aggregate(self, global_params: Group, payloads: Group, weights: Tensor) -> Group:
        """New global values of the payload keys from stacked payloads [C, ...] and weights [C].

        The weights sum to one (n_k / n over the round's clients).
        """
        return {key: torch.tensordot(weights.to(value.dtype), value, dims=1)
                for key, value in payloads.items()}

    def init_kept(self, global_params: Group) -> Tree:
        """Initial kept groups of one client (unbatched)."""
        return {}

    # ---- client side (one client; vmapped by the engine) -------------------------------------
    def receive(self, global_params: Group, previous: Tree) -> Tree:
        """A client's state at the start of a round.

        It holds the global payload keys, its own values of the keys that are never sent, and its
        kept groups.
        """
        own = {key: value for key, value in previous["model"].items() if not self.is_payload(key)}
        payload = {key: value for key, value in global_params.items() if self.is_payload(key)}
        return {"model": merge(payload, own), **{g: previous[g] for g in self.kept}}

    def phases(self) -> tuple[Phase, ...]:
        """Local training of one round."""
        return (Phase(),)

    def eval_phases(self) -> tuple[Phase, ...]:
        """Training done before scoring, from the state the client would receive.

        E.g. Per-FedAvg's adaptation step; none by default.
        """
        return ()

    def local_objective(self, state: Tree, batch, shared: Tree, hp, ctx) -> Tensor:
        """Loss of one client on one mini-batch."""
        return self.task_objective(state, batch, shared, hp, ctx)

    def task_objective(self, state: Tree, batch, shared: Tree, hp, ctx) -> Tensor:
        """The plain task loss of the client's `model` (fine-tuning, adaptation steps)."""
        return ctx.task_loss(state["model"], batch)

    def personalized(self, state: Tree, shared: Tree) -> Group:
        """Parameters of the client's personalized model — what it is scored with.

        `state` is the client's state after its last local training; `shared["global"]` the global
        model.
        """
        if self.predict_with != "model":
            return state[self.predict_with]
        return self.receive(shared["global"], state)["model"]
