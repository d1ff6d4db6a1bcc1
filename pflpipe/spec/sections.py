"""The remaining spec sections.

Experiment, federation, teachers, distillation, evaluation, tracking, storage, resources and
engine.
"""

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from pflpipe.layout import REPORT_HTML, REPORT_JSON, REPORT_MD
from pflpipe.spec.strict_section import MAX_LR, Section

STAGES = (
    "partition_data", "warm_start_fedavg", "train_local", "personalize", "select_teachers",
    "distill_grid_search", "evaluate_fairness",
)
METRICS = (
    "PUI", "PUD", "MPI", "API", "MPD", "APD", "AA", "AV", "CS", "Entropy", "JI", "std", "min",
    "bottom_decile", "top_samples_decile",
)
#: Seeds lie in [0, 2³² − 1]: every generator accepts them and JSON numbers carry them exactly.
MAX_SEED = 2**32 - 1


def checked_seeds(value: list[int]) -> list[int]:
    """A list of seeds as every seeds field takes it: no repeats, each one 0..MAX_SEED."""
    if len(set(value)) != len(value):
        raise ValueError(f"must not repeat a seed (got {value})")
    if any(not 0 <= seed <= MAX_SEED for seed in value):
        raise ValueError(f"every seed must be in 0..{MAX_SEED:,} (2³² − 1), the range every "
                         f"random generator accepts (got {value})")
    return value
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


class Experiment(Section):
    """What the experiment is called, its repetitions and where results go."""

    name: str = Field(description="Experiment name: lowercase letters, digits and '-'.")
    description: str = Field("", description="Free text shown in the report and MLflow.")
    seeds: list[int] = Field(
        [0], min_length=1, max_length=1000, description="Repeated runs, one per seed (each in "
        "0..4294967295)."
    )
    output_dir: str | None = Field(
        None, description="Results directory; results/<name> if omitted."
    )

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", value):
            raise ValueError(
                f"must be 1-63 lowercase letters, digits or '-', starting and ending with a letter "
                f"or digit (a Kubeflow pipeline name), e.g. 'persfl-digits' (got {value!r})"
            )
        return value

    _unique = field_validator("seeds")(classmethod(lambda cls, value: checked_seeds(value)))

    @property
    def results_dir(self) -> str:
        """The results directory."""
        return self.output_dir or f"results/{self.name}"


class EarlyStop(Section):
    """Stop FedAvg when the mean validation loss has not improved for `patience` rounds."""

    patience: int = Field(5, ge=1, description="Rounds without improvement before stopping.")
    min_delta: float = Field(0.0, ge=0, description="Smallest decrease counted as improvement.")


class ServerOptimizer(Section):
    """How the server applies each round's aggregate (Reddi et al., ICLR 2021, Algorithm 2).

    Δ is the clients' weighted mean minus the global model x. fedavg: x ← x + η·Δ. fedadam and
    fedyogi: m ← β₁m + (1 − β₁)Δ; v ← β₂v + (1 − β₂)Δ² (fedadam) or v ← v − (1 − β₂)Δ²·sign(v − Δ²)
    (fedyogi); x ← x + η·m / (√v + τ), with m starting at 0 and v at τ².
    """

    name: Literal["fedavg", "fedadam", "fedyogi"] = Field(
        "fedavg", description="fedavg, fedadam or fedyogi.")
    lr: float | None = Field(
        None, gt=0, description="η: server learning rate; 1 for fedavg (the weighted mean itself) "
        "and 0.01 for fedadam and fedyogi when omitted.")
    beta1: float = Field(0.9, ge=0, lt=1, description="β₁ (fedadam, fedyogi): momentum of Δ.")
    beta2: float = Field(0.99, ge=0, lt=1,
                         description="β₂ (fedadam, fedyogi): decay of the second moment v.")
    tau: float = Field(1e-3, gt=0, description="τ (fedadam, fedyogi): adaptivity, the floor of "
                       "the step's denominator.")

    @property
    def server_lr(self) -> float:
        """η, resolved."""
        return self.lr if self.lr is not None else (1.0 if self.name == "fedavg" else 0.01)


class FederationSettings(Section):
    """FedAvg's rounds and the default local-training settings of every algorithm."""

    rounds: int = Field(20, ge=1, description="Global rounds of the FedAvg warm start.")
    local_epochs: int = Field(1, ge=1, description="Local epochs per round.")
    batch_size: int = Field(20, ge=1, description="Local mini-batch size.")
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="Local optimizer.")
    lr: float = Field(0.05, gt=0, le=MAX_LR, description="Local learning rate.")
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD momentum.")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay.")
    client_fraction: float = Field(
        1.0, gt=0, le=1, description="Fraction of clients sampled per round (at least one)."
    )
    early_stop: EarlyStop | None = Field(None, description="Optional stop on a validation plateau.")
    server_optimizer: ServerOptimizer = Field(
        default_factory=ServerOptimizer,
        description="How FedAvg's server rule applies the round's aggregate, for every algorithm "
        "that keeps that rule (refused beside an algorithm's own server_step): fedavg (the "
        "weighted mean), fedadam or fedyogi.",
    )
    eval_clients: Literal["all", "sampled"] = Field(
        "all",
        description="Which clients each evaluation scores: all, or only the round's sampled ones "
        "(cross-device: a round's cost then grows with the sampled clients), with every client "
        "scored at round 0, every full_eval_every rounds and after the last round. A client's "
        "best round is chosen among the rounds it was scored in; early stopping looks at full "
        "evaluations only.",
    )
    full_eval_every: int | None = Field(
        None, ge=1,
        description="With eval_clients: sampled, also score every client every n rounds.",
    )
    divergence_factor: float | None = Field(
        3.0, gt=1,
        description="Stop a run as diverged (DivergenceError naming the client and round) when, "
        "at an evaluated round, a scored model's mean validation loss over the scored clients "
        "exceeds this multiple of its round-0 value while its mean validation accuracy is no "
        "better than predicting each client's most frequent label (docs/contracts.md, "
        "'Divergence'); null: only a NaN or infinite loss stops a run. Default 3: no shipped "
        "digits spec comes near it.",
    )

    @model_validator(mode="after")
    def _momentum_is_sgd(self):
        if self.optimizer == "adam" and self.momentum:
            raise ValueError("momentum applies to sgd only; adam uses fixed betas (0.9, 0.999)")
        return self


class Teachers(Section):
    """How each client's optimal teacher round is chosen (PersFL stage 1)."""

    criterion: Literal["val_loss", "val_accuracy"] = Field(
        "val_loss",
        description="Lowest validation cross-entropy (thesis eq. 4.1) or best accuracy. Without "
        "a validation split the teacher is the last round.",
    )


def _grid(values: list[float], what: str) -> list[float]:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} grid must not repeat a value (got {values})")
    return values


class Distillation(Section):
    """PersFL stage 2: λ/T grid-search distillation of each client's teacher."""

    lambdas: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        [0.0, 0.25, 0.5, 0.75, 1.0], min_length=1, description="λ grid, each in [0, 1]."
    )
    temperatures: list[Annotated[float, Field(gt=0)]] = Field(
        [1.0, 5.0, 10.0, 15.0, 20.0, 25.0], min_length=1, description="T grid, each > 0."
    )
    epochs: int = Field(10, ge=1, description="Distillation epochs (E).")
    objective: Literal["kl", "ce"] = Field(
        "kl", description="kl: PersFL (eq. 4.2); ce: PersFL-GD's soft cross-entropy (eq. 6.1)."
    )
    teacher: Literal["optimal", "last_round"] = Field(
        "optimal", description="Per-client optimal round, or the last round's model (ablation)."
    )
    selection_split: Literal["val", "train", "test"] = Field(
        "val",
        description="Split whose accuracy chooses (λ, T). 'test' reproduces a test-selected "
        "protocol and is flagged in the report as leaking test labels. 'val' without a "
        "validation split chooses on train.",
    )
    lr: float | None = Field(None, gt=0, le=MAX_LR,
                             description="Learning rate; federation.lr when omitted.")
    batch_size: int | None = Field(None, ge=1, description="Batch size; federation's when omitted.")

    _lambdas = field_validator("lambdas")(lambda v: _grid(v, "λ"))
    _temperatures = field_validator("temperatures")(lambda v: _grid(v, "T"))

    @property
    def model_name(self) -> str:
        """`persfl` for the KL objective, `persfl_gd` for the soft cross-entropy variant."""
        return "persfl" if self.objective == "kl" else "persfl_gd"


class Baselines(Section):
    """Which result-table models are the baselines of QoI = P − max(G, L)."""

    local: str = Field("local", description="Model name of the local-only baseline (L).")
    global_: str = Field(
        "fedavg", alias="global", description="Model name of the global model (G)."
    )

    model_config = Section.model_config | {"populate_by_name": True}


class Evaluation(Section):
    """Metrics and baselines of the fairness report."""

    metrics: list[Literal[METRICS]] = Field(  # type: ignore[valid-type]
        list(METRICS), min_length=1,
        description=f"Metrics shown in {REPORT_MD}/{REPORT_HTML} and logged to MLflow (all by "
        f"default); {REPORT_JSON} always holds every metric.",
    )
    baselines: Baselines = Field(default_factory=Baselines, description="Baseline model names.")
    selection: Literal["best_val", "last_round"] = Field(
        "best_val",
        description="Which per-client model is scored: the round/epoch best on validation among "
        "those the algorithm trained (never round 0, the model it started from), or the last "
        "one. Both are recorded; without a validation split both are the last one.",
    )
    compute_mismatch: float = Field(
        1.5, ge=1,
        description="The report warns when the compared models (all but the baselines) differ "
        "in samples processed in all (the FedAvg warm start a model started from included) by "
        "more than this factor, naming them; a gap their settings do not make (the method's own "
        "cost, e.g. Ditto's second model or PersFL's grid) is said as a note instead.",
    )


#: The tracking URI schemes pflpipe runs on (MLflow's database stores and its server).
TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")


def tracking_scheme(uri: str) -> str:
    """The scheme of a tracking URI, without its driver (``postgresql+psycopg`` → postgresql).

    MLflow's ``databricks`` (a profile of the Databricks CLI) has no ``://``; a bare path has
    no scheme ("").
    """
    if uri == "databricks":
        return "databricks"
    return uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""


def tracking_uri_problem(uri: str) -> str | None:
    """What the text of a tracking URI shows to be wrong, with the fix (None: nothing)."""
    scheme = tracking_scheme(uri)
    examples = "e.g. sqlite:///mlflow.db or http://127.0.0.1:5000"
    if not scheme:
        return (f"has no scheme (got {uri!r}); a tracking URI names its store, {examples}")
    if scheme not in (*TRACKING_SCHEMES, "file"):
        return (f"unsupported scheme {scheme!r}; use one of {', '.join(TRACKING_SCHEMES)}, "
                f"{examples}")
    if scheme == "sqlite" and (not uri.startswith("sqlite:///") or uri[len("sqlite:///"):]
                               .partition("?")[0] in ("", ":memory:")):
        return ("is an in-memory sqlite database, which each stage (a process of its own) "
                "would open empty; name a file with three slashes, e.g. sqlite:///mlflow.db")
    return None


class Tracking(Section):
    """MLflow tracking."""

    enabled: bool = Field(True, description="Track runs in MLflow.")
    uri: str | None = Field(
        None,
        description="Tracking URI; $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the "
        "working directory. Credentials of a server may be given as http://user:password@host "
        "(sent as basic auth, never logged) or in MLFLOW_TRACKING_USERNAME/PASSWORD.",
    )

    @field_validator("uri")
    @classmethod
    def _scheme(cls, value: str | None) -> str | None:
        if value and (problem := tracking_uri_problem(value)):
            raise ValueError(problem)
        return value
    experiment: str | None = Field(
        None, description="MLflow experiment; experiment.name if omitted."
    )
    log_models: bool = Field(True, description="Log every client's personalized state_dict.")


class _Storage(Section):
    """Where checkpoints and artifacts are kept.

    Never holds credentials: they come from the environment (or a Kubernetes secret on a cluster)
    only.
    """


class LocalStorage(_Storage):
    """Checkpoints and artifacts on the local file system."""

    kind: Literal["local"]
    path: str | None = Field(None, description="Directory; experiment.output_dir when omitted.")


class SecretKeys(Section):
    """Which keys of the Kubernetes secret `storage.secret_name` hold the S3 credentials.

    KFP's own MinIO secret, mlpipeline-minio-artifact, names them accesskey and secretkey.
    """

    access_key_id: str = Field(
        "AWS_ACCESS_KEY_ID", description="Key holding the access key id (mounted as "
        "AWS_ACCESS_KEY_ID); 'accesskey' in KFP's mlpipeline-minio-artifact.")
    secret_access_key: str = Field(
        "AWS_SECRET_ACCESS_KEY", description="Key holding the secret access key (mounted as "
        "AWS_SECRET_ACCESS_KEY); 'secretkey' in KFP's mlpipeline-minio-artifact.")


class S3Storage(_Storage):
    """An S3-compatible object store (AWS, MinIO, Ceph)."""

    kind: Literal["s3"]
    bucket: str = Field(description="Bucket name.")
    prefix: str = Field("", description="Key prefix under which the experiment writes.")
    endpoint_url: str | None = Field(None, description="Endpoint, e.g. http://minio:9000.")
    region: str | None = Field(None, description="Region name.")
    secret_name: str | None = Field(
        None,
        description="Kubernetes secret holding the S3 credentials, mounted as the environment "
        "variables AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY on the cluster (never read by pflpipe "
        "itself); its keys are named in secret_keys.",
    )
    secret_keys: SecretKeys = Field(
        default_factory=SecretKeys, description="The keys of secret_name holding the "
        "credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY unless given).")
    max_attempts: int = Field(
        5, ge=1, le=20, description="Attempts per request on transient errors."
    )

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value):
            scheme = value.split("://", 1)[0] if "://" in value else ""
            said = f"has the scheme {scheme}://" if scheme else "has no scheme"
            raise ValueError(f"{said} (got {value!r}); S3 speaks HTTP: write http://host:port or "
                             "https://host, e.g. http://minio:9000")
        return value

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", value):
            raise ValueError(f"is not a valid bucket name (got {value!r})")
        return value


Storage = Annotated[LocalStorage | S3Storage, Field(discriminator="kind")]


class Toleration(Section):
    """A Kubernetes toleration."""

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


def _quantity(value: str | None) -> str | None:
    if value is not None and not _QUANTITY.match(value):
        raise ValueError(
            f"must be a Kubernetes quantity such as '500m', '2' or '4Gi' (got {value!r})"
        )
    return value


class StageResources(Section):
    """Kubernetes resources of one stage's pod."""

    cpu: str | None = Field(None, description="CPU request, e.g. '2' or '500m'.")
    cpu_limit: str | None = Field(None, description="CPU limit.")
    memory: str | None = Field(None, description="Memory request, e.g. '8Gi'.")
    memory_limit: str | None = Field(None, description="Memory limit.")
    gpus: int = Field(0, ge=0, description="GPUs requested (accelerator limit).")
    gpu_type: str = Field("nvidia.com/gpu", description="Accelerator resource name.")
    node_selector: dict[str, str] = Field({}, description="Node selector labels.")
    tolerations: list[Toleration] = Field([], description="Tolerations.")
    image: str | None = Field(None, description="Image of this stage; resources.image if omitted.")

    _quantities = field_validator("cpu", "cpu_limit", "memory", "memory_limit")(_quantity)


class Resources(Section):
    """Per-stage Kubernetes resources; each stage's settings override `default`."""

    image: str = Field("pflpipe:0.1.0-cpu", description="Component image (name:tag).")
    default: StageResources = Field(default_factory=StageResources, description="All stages.")
    partition_data: StageResources | None = None
    warm_start_fedavg: StageResources | None = None
    train_local: StageResources | None = None
    personalize: StageResources | None = None
    select_teachers: StageResources | None = None
    distill_grid_search: StageResources | None = None
    evaluate_fairness: StageResources | None = None

    def for_stage(self, stage: str) -> StageResources:
        """Return `default` overridden by the stage's own settings."""
        own = getattr(self, stage)
        merged = self.default.model_dump()
        if own is not None:
            merged.update(own.model_dump(exclude_unset=True))
        if merged["image"] is None:
            merged["image"] = self.image
        return StageResources.model_validate(merged)


class Engine(Section):
    """How clients are trained."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="cuda when available under 'auto'."
    )
    mode: Literal["batched", "sequential"] = Field(
        "batched", description="batched: all clients as one computation; sequential: a loop."
    )
    max_members: int | None = Field(
        None, ge=1, description="Most models stepped together (limits memory); all when omitted."
    )
    compile: Literal["auto"] | bool = Field(
        "auto",
        description="Compile each batched training step with torch.compile (one graph: "
        "objective, gradient, optimizer update), compiled graphs cached on disk in "
        "$TORCHINDUCTOR_CACHE_DIR or ~/.cache/pflpipe/torch-compile. 'auto' compiles a stage "
        "of many batched steps (rounds × local epochs × batches of the largest client: at "
        "least 20,000 on CPU, 5,000 on CUDA; docs/performance.md). A step that does not "
        "compile runs eagerly, with a logged reason. Batched mode only.",
    )
    precision: Literal["fp32", "tf32", "bf16"] = Field(
        "fp32",
        description="Arithmetic of training and scoring. fp32: IEEE float32 throughout. tf32: "
        "float32 tensors with CUDA matrix products and convolutions in TensorFloat-32 (Ampere "
        "or newer; on a CPU the same as fp32). bf16: mixed precision: forward passes in "
        "bfloat16 (parameters and inputs cast as torch.autocast casts them for linear and "
        "convolution layers), parameters, gradients, optimizer state and losses in float32; "
        "on CPUs and GPUs. Its effect on accuracy: docs/performance.md.",
    )
    threads: int | None = Field(
        None, ge=1, le=1024,
        description="torch CPU threads of every stage's process. When omitted: under `pflpipe "
        "run` the machine's cores divided by `parallel_tasks` (at least 1), elsewhere torch's "
        "default (all cores it sees, which in a container may exceed its CPU limit).",
    )
    parallel_tasks: int | None = Field(
        None, ge=1, le=1024,
        description="Most tasks (seeds, personalization entries) the pipeline runs at once, "
        "as ParallelFor parallelism; on a cluster too when set. When omitted: `pflpipe run` "
        "runs 2 at once (kfp.local's most per loop; 1 on a one-core machine), a cluster all.",
    )
    checkpoint_every: int = Field(
        1, ge=1,
        description="Checkpoint the clients' states every n rounds (and after the last): with "
        "many clients a checkpoint costs more than a round. A resumed run repeats at most n − 1 "
        "rounds and ends with the same result.",
    )
    workers: int = Field(
        1, ge=1, le=256,
        description="Processes a federated stage (warm start, personalization) runs as, each "
        "training a contiguous shard of the clients (torch.distributed: gloo on CPU, NCCL when "
        "every worker has its own GPU); the result equals one process's within float tolerance. "
        "`pflpipe run` starts them on this machine (docs/cluster.md).",
    )
    shards: int = Field(
        1, ge=1, le=1024,
        description="Client shards the stages whose clients train alone (the local baseline, "
        "PersFL's distillation grid and personalization entries such as fedavg_ft) split "
        "into: one pipeline task per shard (KFP ParallelFor; each with its own pod and "
        "resources on a cluster), merged into one results directory that equals the unsharded "
        "one's within float tolerance.",
    )
    seeds_as_members: bool = Field(
        False,
        description="Train every seed of the experiment as members of one batched federation: "
        "one `train_members` task before the seeds loop runs warm_start_fedavg, train_local "
        "and each untuned personalize entry for all seeds at once (then PersFL's teachers, "
        "and every seed's distillation grid as one job), and leaves each seed's finished "
        "checkpoints where that seed's own tasks find them (they then train nothing); when it "
        "trains every task, the seeds loop only collects each seed's results from it. "
        "Entries of one algorithm that differ only in hyper-parameters it takes per member "
        "(Ditto's lam, FedProx's mu, pFedMe's beta, …) train together, and with a tuning "
        "section a second such task trains the tuning seeds' warm starts and grid points. "
        "Results are those of separate per-seed runs, to the bit, and the per-seed tasks keep "
        "their cache keys. `pflpipe validate` lists what is grouped; a stage it cannot group "
        "(early stopping, a server optimizer, an algorithm with networks of its own, seeds "
        "with unequal client counts) trains per seed (docs/performance.md).",
    )

    @model_validator(mode="after")
    def _members_in_one_process(self):
        if self.seeds_as_members and (self.workers > 1 or self.shards > 1):
            raise ValueError("seeds_as_members trains every seed in one process; it does not "
                             "combine with workers > 1 or shards > 1 (set those to 1, or "
                             "seeds_as_members: false)")
        return self
