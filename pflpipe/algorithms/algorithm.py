"""FedAvg's answers to every hook of the engine's protocol; an algorithm overrides the rest.

An algorithm says only how it differs from FedAvg; the engine (`pflpipe.engine.federation`) owns
every loop and the hook protocol (`pflpipe.engine.protocol`: `Phase`, `Round` and the roles
below). A client's state is a tree of named groups (`pflpipe.engine.tree`): ``"model"`` is the
network it trains and (partly) sends; algorithms add groups such as Ditto's ``"personal"``. The
server holds the global model and, when an algorithm needs it, a server state (a tree too).

**Client rule**, written for one client; the engine vmaps it over clients:

==================  ===========================================================  ==================
hook                defines                                                      FedAvg default
==================  ===========================================================  ==================
``kept``            groups that survive rounds per client, never aggregated      none
``init_kept``       a client's kept groups before round 1                        none
``init_clients``    every client's kept groups before round 1, stacked [M, ...]  ``init_kept`` for
                    (when they differ by client)                                 every client
``is_payload``      which ``model`` keys are sent and aggregated                 every key
``fresh``           groups a client starts each round with anew (pFedMe's θ,     none
                    Flow's local copy), from the state the engine merged
``receive``         not a hook: the engine's merge (payload keys from the        payload + own
                    server, own keys not held by a kept group, kept groups),     keys + kept
                    then ``fresh``
``phases``          local training: which groups, which objective, how long      train ``model``
``local_objective`` the loss one client minimises on one mini-batch              task loss
``eval_phases``     training done before scoring (Per-FedAvg's adaptation)        none
``finish``          the state a client keeps after local training                as trained
``diagnostics``     what the client's mechanism did this round (recorded)         none
==================  ===========================================================  ==================

**Server rule**, one round at once (a `Round`, client axis first, outside vmap):

==================  ===========================================================  ==================
``modules``         extra networks (a router …); their parameters start in the   none
                    server state under the module's name
``init_server``     the server state before round 1                              empty
``dispatch``        what each client starts the round from, per client [C]       the global model
``schedule``        each client's steps and learning rate of a phase [C]         epochs × batches
``aggregate``       how the server combines payloads                             mean weighted n_k/n
``server_step``     new global values and server state from the round's client   `aggregate` of the
                    states (any group) and sample counts; the one server rule:   payloads, moved by
                    FedAvg's applies ``federation.server_optimizer``, an own     the server
                    replaces it (a server optimizer beside it is refused)        optimizer
``server_diagnostics`` what the server step did, per client [C, ...] (recorded)  none
==================  ===========================================================  ==================

**Scoring**:

==================  ===========================================================  ==================
``predict_with``    the group scored by the default ``personalized``             ``model``
``personalized``    the parameters of the client's personalized network          ``predict_with``
``scored``          the client's personalized model as a tree (stored, scored)   {"model": …}
``predict``         outputs of that model on inputs (a mixture, an MC average)    forward pass
``views``           other ways ``predict`` scores the same model (each reported)  none
``global_model``    the network scored as the global model on every client (GA)   the global model
``has_global_model`` whether ``global_model`` is scored (GA)                     True
==================  ===========================================================  ==================

Objectives are callables: a `Phase` names its loss as ``objective=self.personal_objective``
(the default is ``local_objective``), each with the signature of ``local_objective``.
Client-side hooks are pure tensor functions: they write nothing to ``self``, call no
``.item()`` and branch on no tensor value. Randomness comes from the engine:
``ctx.normal(batch["key"], shape)`` in objectives and ``ctx.normal(key, shape)`` in `predict`
draw noise from the member's seed and step, never from the global RNG.
"""

from typing import ClassVar, Generic, TypeVar

from torch import Tensor, nn

from pflpipe.engine.optim import ServerOptimizerConfig, server_update
from pflpipe.engine.protocol import Phase, Round, default, overridden, received
from pflpipe.engine.tree import Group, Tree, broadcast, weighted_mean
from pflpipe.spec.algorithms import Params, algorithm_name

#: The algorithm classes by name, filled by `@register` as `pflpipe.algorithms` is imported.
REGISTRY: dict[str, type["Algorithm"]] = {}


def register(cls: type["Algorithm"]) -> type["Algorithm"]:
    """Class decorator: make the algorithm available under its params model's `name`."""
    name = algorithm_name(cls.params_type())
    if name is None:
        raise TypeError(f"{cls.__name__}: its params model declares no `name: Literal[...]`")
    REGISTRY[name] = cls
    return cls


P = TypeVar("P", bound=Params)
#: FedAvg's server optimizer: the aggregate as it is.
IDENTITY = ServerOptimizerConfig()

__all__ = ["REGISTRY", "Algorithm", "Phase", "Round", "register"]


class Algorithm(Generic[P]):
    """FedAvg. Subclasses override only the hooks in which they differ.

    It implements the engine's `pflpipe.engine.protocol.AlgorithmProtocol`: a client rule, a
    server rule and scoring, in this order below.
    """

    kept: ClassVar[tuple[str, ...]] = ()   # groups carried over rounds per client
    predict_with: ClassVar[str] = "model"  # group scored by the default `personalized`
    has_global_model: ClassVar[bool] = True  # False: no global model to score (GA), e.g. local
    views: ClassVar[tuple[str, ...]] = ()    # other views of the scored model (`predict`'s view)
    #: Hyper-parameters whose values may differ between runs trained as members of one batched
    #: run (`pflpipe.engine.variants` says how the hooks may read them).
    member_params: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: P, *, head: frozenset[str], lr: float, local_epochs: int,
                 server_optimizer: ServerOptimizerConfig = IDENTITY):
        self.params, self.head, self.lr, self.local_epochs = params, head, lr, local_epochs
        self.server_optimizer = server_optimizer   # applied by FedAvg's `server_step`
        if not server_optimizer.is_identity and overridden(self, "server_step"):
            raise ValueError(
                f"{type(self).__name__} has its own server rule (server_step), which replaces "
                f"FedAvg's and so the server optimizer {server_optimizer.name!r}: leave "
                "federation.server_optimizer at fedavg, or write the optimizer into the "
                "algorithm's server_step")

    @classmethod
    def params_type(cls) -> type[Params]:
        """The params model this algorithm is configured by."""
        return cls.__orig_bases__[0].__args__[0]  # type: ignore[attr-defined]

    # ---- client rule (one client; vmapped by the engine) -------------------------------------
    def init_kept(self, global_params: Group) -> Tree:
        """Initial kept groups of one client (unbatched)."""
        return {}

    def init_clients(self, global_params: Group, n_clients: int) -> Tree:
        """Every client's kept groups before round 1 [n_clients, ...]: `init_kept` for each."""
        return {g: broadcast(t, n_clients) for g, t in self.init_kept(global_params).items()}

    def is_payload(self, key: str) -> bool:
        """Whether `model[key]` is sent to the server and aggregated."""
        return True

    def fresh(self, state: Tree, shared: Tree | None) -> Tree:
        """Groups a client starts each round with anew (not kept): none.

        `state` is what the engine merged (`pflpipe.engine.protocol.received`): the received
        payload with the client's own keys in ``model``, and its kept groups; `shared` holds the
        global model (``"global"``) and the server state (``"server"``), or is None when a
        hook asks only for ``model``.
        """
        return {}

    def receive(self, global_params: Group, previous: Tree, shared: Tree | None = None) -> Tree:
        """A client's state at the start of a round: the engine's merge, then `fresh`.

        Not a hook: what a client starts from is stated by `is_payload`, `kept` and `fresh`.
        """
        return received(self, global_params, previous, shared)

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
        return ctx.task_loss(state["model"], batch)

    def finish(self, start: Tree, trained: Tree, shared: Tree) -> Tree:
        """The state a client keeps (and uploads) after local training that began at `start`."""
        return trained

    @default
    def diagnostics(self, state: Tree, shared: Tree, batch, ctx) -> dict[str, Tensor]:
        """What this client's mechanism did this round: {name: tensor} (none by default).

        To add one, override this and return named tensors computed from `state` (the client's
        state after local training and `finish`), `shared` (the global model and server state the
        round started from) and, when a diagnostic depends on inputs (a routing share), `batch`:
        the client's training samples (the first 512 at most, ``batch["mask"]`` marks the real
        ones) and `ctx`. Pure tensor function, vmapped over the round's clients like the
        other client hooks. The engine records each value per client and round: a scalar as
        history.csv column ``diag.<name>`` and MLflow metric of that name, a vector's entry i as
        ``diag.<name>.i``; the report plots each over rounds.
        """
        return {}

    # ---- server rule (one round, every client at once) ---------------------------------------
    @default
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

    def dispatch(self, round: Round) -> Group | None:
        """Per-client starting values of the global model [C, ...]; None: all get the global."""
        return None

    def schedule(self, round: Round, phase: Phase, steps: Tensor, lr: Tensor
                 ) -> tuple[Tensor, Tensor]:
        """Each client's optimizer steps [C] and learning rate [C] of `phase` this round."""
        return steps, lr

    def aggregate(self, global_params: Group, payloads: Group, weights: Tensor) -> Group:
        """New global values of the payload keys from stacked payloads [C, ...] and weights [C].

        The weights sum to one (n_k / n over the round's clients).
        """
        return weighted_mean(payloads, weights)

    @default
    def server_step(self, round: Round) -> tuple[Group, Tree]:
        """New global values (of the keys that change) and the new server state.

        The `aggregate` of the payloads, applied by the server optimizer
        (``federation.server_optimizer``; FedAvg's η = 1 takes the aggregate as it is), whose
        moments the server state keeps as groups of the server's own (`optim.MOMENTS`).
        """
        payloads = {k: v for k, v in round.states["model"].items() if self.is_payload(k)}
        if not payloads:
            return {}, round.server
        mean = self.aggregate(round.global_params, payloads, round.weights)
        return server_update(self.server_optimizer, round.global_params, mean, round.server)

    @default
    def server_diagnostics(self, round: Round, server: Tree) -> dict[str, Tensor]:
        """Server-held quantities to record per client: {name: [C, ...]} (none by default).

        `round` is what `server_step` saw (the trained client states), `server` the server state
        it returned (e.g. aggregation weights kept there). Recorded like `diagnostics`.
        """
        return {}

    # ---- scoring -------------------------------------------------------------------------------
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
