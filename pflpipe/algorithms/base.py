"""The algorithm extension point.

An algorithm says only how it differs from FedAvg; the engine (`pflpipe.engine.federation`) owns
every loop. A client's state is a tree of named groups (`pflpipe.engine.tree`): ``"model"`` is the
network it trains and (partly) sends; algorithms add groups such as Ditto's ``"personal"``. The
server holds the global model and, when an algorithm needs it, a server state (a tree too).

Server-side hooks see one round at once (a `Round`, client axis first, outside vmap):

==================  ===========================================================  ==================
hook                defines                                                      FedAvg default
==================  ===========================================================  ==================
``modules``         extra networks (a router …); their parameters start in the   none
                    server state under the module's name
``init_server``     the server state before round 1                              empty
``init_kept``       a client's kept groups before round 1                        none
``init_clients``    every client's kept groups before round 1, stacked [M, ...]  ``init_kept`` for
                    (when they differ by client)                                 every client
``dispatch``        what each client starts the round from, per client [C]       the global model
``schedule``        each client's steps and learning rate of a phase [C]         epochs × batches
``is_payload``      which ``model`` keys are sent and aggregated                 every key
``aggregate``       how the server combines payloads                             mean weighted n_k/n
``server_step``     new global values and server state from the round's client   `aggregate` of the
                    states (any group) and sample counts                         payloads
``server_diagnostics`` what the server step did, per client [C, ...] (recorded)  none
==================  ===========================================================  ==================

Client-side hooks are written for one client; the engine vmaps them over clients:

==================  ===========================================================  ==================
``receive``         a client's state at the start of a round                     global payload +
                                                                                 own keys + kept
``phases``          local training: which groups, which objective, how long      train ``model``
``local_objective`` the loss one client minimises on one mini-batch              task loss
``finish``          the state a client keeps after local training                as trained
``eval_phases``     training done before scoring (Per-FedAvg's adaptation)        none
``personalized``    the parameters of the client's personalized network          ``predict_with``
``scored``          the client's personalized model as a tree (stored, scored)   {"model": …}
``predict``         outputs of that model on inputs (a mixture, an MC average)    forward pass
``global_model``    the network scored as the global model on every client (GA)   the global model
``diagnostics``     what the client's mechanism did this round (recorded)         none
==================  ===========================================================  ==================

``kept`` (groups that survive rounds per client, never aggregated), ``predict_with`` (the group
scored by default), ``has_global_model`` (whether `global_model` is scored, GA) and ``views``
(other ways `predict` scores the same model, each reported under its name) are class
attributes. Client-side hooks are pure tensor functions: they write
nothing to ``self``, call no ``.item()`` and branch on no tensor value. Randomness comes from the
engine: ``ctx.normal(batch["key"], shape)`` in objectives and ``ctx.normal(key, shape)`` in
`predict` draw noise from the member's seed and step, never from the global RNG.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

from torch import Tensor, nn

from pflpipe.engine.tree import Group, Tree, broadcast, merge, weighted_mean
from pflpipe.spec.algorithms import Params, algorithm_name

P = TypeVar("P", bound=Params)

REGISTRY: dict[str, type["Algorithm"]] = {}


def register(cls: type["Algorithm"]) -> type["Algorithm"]:
    """Class decorator: make the algorithm available under its params model's `name`."""
    name = algorithm_name(cls.params_type())
    if name is None:
        raise TypeError(f"{cls.__name__}: its params model declares no `name: Literal[...]`")
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
    full_batch: bool = False              # each step sees all of a client's samples (one epoch)
    #: The part of the client's training samples the phase trains on: (start, stop) fractions of
    #: a shuffle drawn per round and client, the same for every phase of the round, so (0, 0.5)
    #: and (0.5, 1) are disjoint halves (Flow); every sample if None.
    part: tuple[float, float] | None = None
    #: (objective, groups) updates that follow the phase's own on the same mini-batch at every
    #: step, each with its own optimizer (Flow's alternating policy and global steps).
    then: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: The phase's local optimizer ("sgd" or "adam") instead of the federation's (pFedBayes).
    optimizer: str | None = None


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


class Algorithm(Generic[P]):
    """FedAvg. Subclasses override only the hooks in which they differ."""

    kept: ClassVar[tuple[str, ...]] = ()   # groups carried over rounds per client
    predict_with: ClassVar[str] = "model"  # group scored by the default `personalized`
    has_global_model: ClassVar[bool] = True  # False: no global model to score (GA), e.g. local
    views: ClassVar[tuple[str, ...]] = ()    # other views of the scored model (`predict`'s view)

    def __init__(self, params: P, *, head: frozenset[str], lr: float, local_epochs: int):
        self.params, self.head, self.lr, self.local_epochs = params, head, lr, local_epochs

    @classmethod
    def params_type(cls) -> type[Params]:
        """The params model this algorithm is configured by."""
        return cls.__orig_bases__[0].__args__[0]  # type: ignore[attr-defined]

    # ---- server side (one round, every client at once) --------------------------------------
    def modules(self, in_shape: tuple[int, ...], n_outputs: int,
                model: nn.Module | None = None) -> dict[str, nn.Module]:
        """Extra networks, built by the engine under a seeded RNG; called by name via `ctx.call`.

        `model` is the network (an override that names the argument gets it; Flow sizes its
        router by the model's layers).
        """
        return {}

    def init_server(self, global_params: Group, n_clients: int) -> Tree:
        """The server state before round 1 (besides the `modules`' parameters)."""
        return {}

    def init_kept(self, global_params: Group) -> Tree:
        """Initial kept groups of one client (unbatched)."""
        return {}

    def init_clients(self, global_params: Group, n_clients: int) -> Tree:
        """Every client's kept groups before round 1 [n_clients, ...]: `init_kept` for each."""
        return {g: broadcast(t, n_clients) for g, t in self.init_kept(global_params).items()}

    def dispatch(self, round: Round) -> Group | None:
        """Per-client starting values of the global model [C, ...]; None: all get the global."""
        return None

    def schedule(self, round: Round, phase: Phase, steps: Tensor, lr: Tensor
                 ) -> tuple[Tensor, Tensor]:
        """Each client's optimizer steps [C] and learning rate [C] of `phase` this round."""
        return steps, lr

    def is_payload(self, key: str) -> bool:
        """Whether `model[key]` is sent to the server and aggregated."""
        return True

    def aggregate(self, global_params: Group, payloads: Group, weights: Tensor) -> Group:
        """New global values of the payload keys from stacked payloads [C, ...] and weights [C].

        The weights sum to one (n_k / n over the round's clients).
        """
        return weighted_mean(payloads, weights)

    def server_step(self, round: Round) -> tuple[Group, Tree]:
        """New global values (of the keys that change) and the new server state."""
        payloads = {k: v for k, v in round.states["model"].items() if self.is_payload(k)}
        if not payloads:
            return {}, round.server
        return self.aggregate(round.global_params, payloads, round.weights), round.server

    def server_diagnostics(self, round: Round, server: Tree) -> dict[str, Tensor]:
        """Server-held quantities to record per client: {name: [C, ...]} (none by default).

        `round` is what `server_step` saw (the trained client states), `server` the server state
        it returned (e.g. aggregation weights kept there). Recorded like `diagnostics`.
        """
        return {}

    # ---- client side (one client; vmapped by the engine) -------------------------------------
    def receive(self, global_params: Group, previous: Tree, shared: Tree | None = None) -> Tree:
        """A client's state at the start of a round.

        It holds the global payload keys, its own values of the keys that are never sent, and its
        kept groups. `global_params` is what `dispatch` sent this client; `shared` holds the
        global model (``"global"``) and the server state (``"server"``).
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
        """Loss of one client on one mini-batch (optionally with new values of some groups)."""
        return self.task_objective(state, batch, shared, hp, ctx)

    def task_objective(self, state: Tree, batch, shared: Tree, hp, ctx) -> Tensor:
        """The plain task loss of the client's `model` (fine-tuning, adaptation steps)."""
        return ctx.task_loss(state["model"], batch)

    def finish(self, start: Tree, trained: Tree, shared: Tree) -> Tree:
        """The state a client keeps (and uploads) after local training that began at `start`."""
        return trained

    def diagnostics(self, state: Tree, shared: Tree, batch, ctx) -> dict[str, Tensor]:
        """What this client's mechanism did this round: {name: tensor} (none by default).

        To add one, override this and return named tensors computed from `state` (the client's
        state after local training and `finish`), `shared` (the global model and server state the
        round started from) and, when a diagnostic depends on inputs (a routing share), `batch`:
        the client's first training samples (at most one mini-batch, ``batch["mask"]`` marks the
        real ones) and `ctx`. Pure tensor function, vmapped over the round's clients like the
        other client hooks. The engine records each value per client and round: a scalar as
        history.csv column ``diag.<name>`` and MLflow metric of that name, a vector's entry i as
        ``diag.<name>.i``; the report plots each over rounds.
        """
        return {}

    def personalized(self, state: Tree, shared: Tree) -> Group:
        """Parameters of the client's personalized network.

        `state` is the client's state after its last local training; `shared["global"]` the global
        model.
        """
        if self.predict_with != "model":
            return state[self.predict_with]
        return self.receive(shared["global"], state, shared)["model"]

    def scored(self, state: Tree, shared: Tree) -> Tree:
        """The client's personalized model as a tree of groups.

        It is what `predict` scores, what is kept at the client's best round and what is written
        as the client's model artifact.
        """
        return {"model": self.personalized(state, shared)}

    def global_model(self, shared: Tree) -> Group:
        """Parameters of the network scored as the global model on every client (its GA)."""
        return shared["global"]

    def predict(self, model: Tree, x: Tensor, ctx, key: Tensor, view: str = "") -> Tensor:
        """Outputs of a `scored` model on inputs `x`; `key` seeds any noise (`ctx.normal`).

        `view` is "" for the personalized model, else one of `views` (each scored and reported
        under its name too, e.g. Flow's ``soft`` routing next to its hard routing).
        """
        return ctx.forward(model["model"], x)
