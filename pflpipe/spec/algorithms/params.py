"""What every algorithm entry of the spec shares.

An algorithm's own parameters live in ``pflpipe/spec/algorithms/<name>_params.py``, one params model
per algorithm and the only home of its defaults. They live apart from the algorithm's code
(``pflpipe/algorithms/<name>.py``) so that validating a spec never imports torch.
"""

import re
import typing
from typing import ClassVar, Literal, NamedTuple

from pydantic import Field, field_validator

from pflpipe.spec.strict_section import MAX_LR, Section


class Rounds(NamedTuple):
    """How an entry's training is counted."""

    rounds: int
    local_epochs: int
    client_fraction: float


def algorithm_name(model: type["Params"]) -> str | None:
    """The algorithm name a params model declares (``name: Literal["<name>"]``); None if not.

    >>> class Fedx(Params):
    ...     name: Literal["fedx"] = "fedx"
    >>> algorithm_name(Fedx)
    'fedx'
    """
    field = model.model_fields.get("name")
    args = typing.get_args(field.annotation) if field else ()
    if (field is None or typing.get_origin(field.annotation) is not Literal or len(args) != 1
            or not isinstance(args[0], str)):
        return None
    return args[0]


class Params(Section):
    """Fields every algorithm entry accepts."""

    #: The pipeline stage that runs entries of this algorithm.
    stage: ClassVar[str] = "personalize"
    #: Whether the clients never communicate (nothing is sent), so that the entry can run as
    #: client shards, one pipeline task each (`engine.shards`, `pflpipe.stages.merge_shards`).
    clients_train_alone: ClassVar[bool] = False
    #: Fields that name an entry or choose where it starts and that no hook reads: runs of one
    #: algorithm trained as members of one batched run may differ in them
    #: (`pflpipe.engine.variants`).
    run_fields: ClassVar[tuple[str, ...]] = ("label", "warm_start")

    label: str | None = Field(
        None,
        description="Name of this entry in results and MLflow; the algorithm name when omitted. "
        "Lets one spec compare the same algorithm with different parameters. It also keys the "
        "entry's random stream (mini-batch order, random draws), so renaming an entry retrains it "
        "on another stream: its scores move by about one seed's training noise. Compare entries "
        "over several seeds (experiment.seeds), which measure that noise.",
    )
    lr: float | None = Field(None, gt=0, le=MAX_LR,
                             description="Learning rate; federation.lr when omitted.")
    batch_size: int | None = Field(
        None, ge=1, description="Mini-batch size; federation.batch_size when omitted."
    )

    @field_validator("label")
    @classmethod
    def _slug(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", value):
            raise ValueError(f"must be lowercase letters, digits, '-' or '_' (got {value!r})")
        return value

    @property
    def display_name(self) -> str:
        """The name this entry carries in result tables."""
        return self.label or self.name  # type: ignore[attr-defined]

    def saved_beside(self, model: int, head: int | None, features: int) -> int:
        """Parameters each client's saved model holds beside the model's own (none here).

        `model` and `head` count the model's and its head's parameters (None: not known),
        `features` the input's. The disk estimate adds them (`pflpipe.disk`).
        """
        return 0


class FederatedParams(Params):
    """Fields of algorithms that run federated rounds."""

    rounds: int | None = Field(None, ge=1, description="Rounds; federation.rounds when omitted.")
    local_epochs: int | None = Field(
        None, ge=1, description="Local epochs per round; federation.local_epochs when omitted."
    )
    client_fraction: float | None = Field(
        None, gt=0, le=1,
        description="Fraction of clients sampled per round (the activity rate C, at least one "
        "client, drawn from the seed); federation.client_fraction when omitted.",
    )
    warm_start: Literal["final", "none"] | int = Field(
        "final",
        description="Starting point: the FedAvg warm start's final global model, 'none' (the "
        "seeded initial model) or a round index of the warm start's checkpoints.",
    )
    eval_every: int = Field(1, ge=1, description="Evaluate the personalized models every n rounds.")

    @field_validator("warm_start")
    @classmethod
    def _round(cls, value):
        if isinstance(value, int) and value < 0:
            raise ValueError(f"a round index must be 0 or more (got {value})")
        return value

    def rounds_of(self, federation) -> Rounds:
        """Rounds, local epochs and client fraction: the entry's own, else the federation's."""
        return Rounds(self.rounds or federation.rounds,
                      self.local_epochs or federation.local_epochs,
                      self.client_fraction or federation.client_fraction)


class StandaloneParams(Params):
    """Fields of algorithms whose clients train alone: one "round" is one epoch of every client."""

    clients_train_alone: ClassVar[bool] = True
    #: Starting point: the warm start's final global model, or 'none' (the seeded initial model).
    warm_start: ClassVar[str] = "final"
    eval_every: ClassVar[int] = 1

    epochs: int

    def rounds_of(self, federation) -> Rounds:
        """`epochs` rounds of one epoch each, every client every round."""
        return Rounds(self.epochs, 1, 1.0)
