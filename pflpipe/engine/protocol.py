"""The hook protocol: what the engine calls on an algorithm, owned by the engine.

An algorithm (`pflpipe.algorithms.algorithm.Algorithm` holds FedAvg's answers) implements three
roles:

- `ClientRule`: how one client starts a round, trains and finishes it (vmapped over clients);
- `ServerRule`: what the server sends, how it schedules and combines the round (one round at
  once, client axis first, outside vmap);
- `Scoring`: which model of a client is scored, and how it predicts.

`Phase` says how one stretch of local training runs (its objective is a callable), `Round` is
what the server rule sees of a round. The engine imports nothing from `pflpipe.algorithms`;
`pflpipe/spec/registration.py` reads the signatures below (as source, without torch) to check an
algorithm's hooks at ``pflpipe validate``.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar
from typing import Protocol as _Protocol

from torch import Tensor, nn

from pflpipe.engine.tree import Group, Tree, merge

#: objective(state, batch, shared, hp, ctx) -> loss, or (loss, new values of untrained groups):
#: the loss one client minimises on one mini-batch.
Objective = Callable[..., "Tensor | tuple[Tensor, Tree]"]


@dataclass(frozen=True)
class Phase:
    """One stretch of local training in a round."""

    train: tuple[str, ...] = ("model",)   # groups that receive gradients
    #: The loss the phase minimises (an `Objective`, e.g. ``self.personal_objective``); the
    #: algorithm's `local_objective` if None.
    objective: Objective | None = None
    epochs: int | None = None             # passes over the client's data; the round default if None
    steps: int | None = None              # a fixed number of steps instead of epochs
    lr: float | None = None               # the algorithm's lr if None
    group_lr: Mapping[str, float] = field(default_factory=dict)  # per-group overrides
    batches_per_step: int = 1             # mini-batches each step draws (Per-FedAvg: 2 or 3)
    full_batch: bool = False              # each step sees all of a client's samples (one epoch)
    #: The part of the client's training samples the phase trains on: (start, stop) fractions of
    #: a shuffle drawn per round and client, the same for every phase of the round, so (0, 0.5)
    #: and (0.5, 1) are disjoint halves (Flow); every sample if None.
    part: tuple[float, float] | None = None
    #: (objective, groups) updates that follow the phase's own on the same mini-batch at every
    #: step, each with its own optimizer (Flow's alternating policy and global steps).
    then: tuple[tuple[Objective, tuple[str, ...]], ...] = ()
    #: The phase's local optimizer ("sgd" or "adam") instead of the federation's (pFedBayes).
    optimizer: str | None = None


def objective_name(objective: Objective | None) -> str:
    """How an error names a phase's objective (``local_objective`` for the default)."""
    return "local_objective" if objective is None else getattr(
        objective, "__name__", type(objective).__name__)


@dataclass(frozen=True)
class Round:
    """What the server-side hooks see of one round; tensors have the client axis first."""

    index: int            # round_idx (1 for the first round)
    clients: Tensor       # [C] ids of the round's clients
    counts: Tensor        # [C] their training samples
    n_clients: int        # M: every client of the federation
    global_params: Group  # the global model at the start of the round
    server: Tree          # the server state at the start of the round
    states: Tree          # [C] client states: before training (dispatch, schedule), after it
                          # (server_step)
    seed: int = 0         # seeds the round's server-side draws (from the run's seed and round)

    @property
    def weights(self) -> Tensor:
        """FedAvg's weights n_k / n over the round's clients [C]."""
        counts = self.counts.float()
        return counts / counts.sum()


def default(hook: Callable) -> Callable:
    """Mark FedAvg's answer to a hook, so the engine can tell when it was replaced (`overridden`).

    The engine skips `diagnostics` nobody defined; FedAvg's `server_step` refuses a server
    optimizer on top of an algorithm's own.
    """
    hook.is_default = True  # type: ignore[attr-defined]
    return hook


def overridden(algorithm: object, hook: str) -> bool:
    """Whether `algorithm` replaces FedAvg's `hook` (one marked `default`)."""
    return not getattr(getattr(type(algorithm), hook), "is_default", False)


#: Server-state groups whose names start with this are the server's own (the server optimizer's
#: moments): the server rule sees them, the clients never receive them (`public`).
PRIVATE = "_"


def public(server: Tree) -> Tree:
    """The server state the clients receive (``shared["server"]``): all but `PRIVATE` groups."""
    return {name: group for name, group in server.items() if not name.startswith(PRIVATE)}


def task_objective(state: Tree, batch, shared: Tree, hp, ctx) -> Tensor:
    """The plain task loss of the client's `model` (fine-tuning, adaptation steps)."""
    return ctx.task_loss(state["model"], batch)


def received(rule: "ClientRule", global_params: Group, previous: Tree, shared: Tree | None
             ) -> Tree:
    """A client's state at the start of a round, as the engine merges it.

    ``model`` holds the received payload keys (`is_payload`) and the client's own values of the
    keys it never sends, unless a kept group holds them (FedRep's ``head``); then come the
    `kept` groups, then the groups `fresh` makes anew for the round.
    """
    held = {key for group in rule.kept for key in previous[group]}
    own = {key: value for key, value in previous["model"].items()
           if not rule.is_payload(key) and key not in held}
    payload = {key: value for key, value in global_params.items() if rule.is_payload(key)}
    state = {"model": merge(payload, own), **{group: previous[group] for group in rule.kept}}
    return {**state, **rule.fresh(state, shared)}


class ClientRule(_Protocol):
    """One client's round; every method is vmapped over the round's clients by the engine."""

    kept: ClassVar[tuple[str, ...]]   # groups carried over rounds per client, never aggregated

    def init_kept(self, global_params: Group) -> Tree:
        """Initial kept groups of one client (unbatched)."""

    def init_clients(self, global_params: Group, n_clients: int) -> Tree:
        """Every client's kept groups before round 1 [n_clients, ...]."""

    def is_payload(self, key: str) -> bool:
        """Whether `model[key]` is sent to the server and aggregated."""

    def fresh(self, state: Tree, shared: Tree | None) -> Tree:
        """Groups a client starts each round with anew, from its `received` state."""

    def receive(self, global_params: Group, previous: Tree, shared: Tree | None = None) -> Tree:
        """A client's state at the start of a round (`received`)."""

    def phases(self) -> tuple[Phase, ...]:
        """Local training of one round."""

    def eval_phases(self) -> tuple[Phase, ...]:
        """Training done before scoring, from the state the client would receive."""

    def local_objective(self, state: Tree, batch, shared: Tree, hp, ctx) -> Tensor:
        """Loss of one client on one mini-batch (an `Objective`)."""

    def finish(self, start: Tree, trained: Tree, shared: Tree) -> Tree:
        """The state a client keeps (and uploads) after local training that began at `start`."""

    def diagnostics(self, state: Tree, shared: Tree, batch, ctx) -> dict[str, Tensor]:
        """What this client's mechanism did this round: {name: tensor}."""


class ServerRule(_Protocol):
    """The server's side of a round, for every client of the round at once."""

    def modules(self, in_shape: tuple[int, ...], n_outputs: int,
                model: nn.Module | None = None) -> dict[str, nn.Module]:
        """Extra networks, built by the engine under a seeded RNG."""

    def init_server(self, global_params: Group, n_clients: int) -> Tree:
        """The server state before round 1."""

    def dispatch(self, round: Round) -> Group | None:
        """Per-client starting values of the global model [C, ...]; None: all get the global."""

    def schedule(self, round: Round, phase: Phase, steps: Tensor, lr: Tensor
                 ) -> tuple[Tensor, Tensor]:
        """Each client's optimizer steps [C] and learning rate [C] of `phase` this round."""

    def aggregate(self, global_params: Group, payloads: Group, weights: Tensor) -> Group:
        """New global values of the payload keys from stacked payloads [C, ...] and weights [C]."""

    def server_step(self, round: Round) -> tuple[Group, Tree]:
        """New global values (of the keys that change) and the new server state.

        The one server rule: FedAvg's applies the server optimizer (`pflpipe.engine.optim`) to
        the `aggregate`; an algorithm's own replaces it.
        """

    def server_diagnostics(self, round: Round, server: Tree) -> dict[str, Tensor]:
        """Server-held quantities to record per client: {name: [C, ...]}."""


class Scoring(_Protocol):
    """What is scored of a client, and how it predicts."""

    predict_with: ClassVar[str]       # group scored by the default `personalized`
    has_global_model: ClassVar[bool]  # False: no global model to score (GA)
    views: ClassVar[tuple[str, ...]]  # other views of the scored model (`predict`'s view)

    def personalized(self, state: Tree, shared: Tree) -> Group:
        """Parameters of the client's personalized network."""

    def scored(self, state: Tree, shared: Tree) -> Tree:
        """The client's personalized model as a tree of groups (stored, scored)."""

    def global_model(self, shared: Tree) -> Group:
        """Parameters of the network scored as the global model on every client (its GA)."""

    def predict(self, model: Tree, x: Tensor, ctx, key: Tensor, view: str = "") -> Tensor:
        """Outputs of a `scored` model on inputs `x`; `key` seeds any noise."""


class AlgorithmProtocol(ClientRule, ServerRule, Scoring, _Protocol):
    """Every hook the engine calls: a client rule, a server rule and scoring."""

    lr: float
