"""PersFL stage 2: every client distils its teacher into a student for every (λ, T) of the grid.

All clients × all grid points are trained at once on the engine; each client keeps the pair that
scores best on the selection split (thesis Alg. 1 lines 12-25).
"""

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pflpipe.distill.objective import distill_objective
from pflpipe.engine.accounting import job_compute
from pflpipe.engine.data import FederatedData, SplitData, member_seed, steps_for_epochs
from pflpipe.engine.evaluate import evaluate
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.records import TRAINING
from pflpipe.engine.trainer import Context, Job
from pflpipe.engine.tree import Group
from pflpipe.errors import DivergenceError


@dataclass(frozen=True)
class GridConfig:
    """The grid and how each student trains."""

    lambdas: tuple[float, ...]
    temperatures: tuple[float, ...]
    epochs: int
    batch_size: int
    lr: float
    objective: str = "kl"
    selection_split: str = "val"
    optimizer: OptimizerConfig = OptimizerConfig()
    seed: int = 0
    stream: int = 3

    @property
    def pairs(self) -> list[tuple[float, float]]:
        """Grid points (λ, T), λ-major."""
        return [(lam, t) for lam in self.lambdas for t in self.temperatures]


@dataclass
class GridResult:
    """Every pair's scores, each client's chosen pair, and the chosen students' parameters."""

    grid: list[dict]       # client, lam, temperature, {split}_loss, {split}_accuracy
    chosen: list[dict]     # the same, for the pair each client chose
    params: Group          # chosen students [C, ...]
    steps: Tensor | None = None     # [C] optimizer steps of all the client's students
    samples: Tensor | None = None   # [C] samples they processed (`accounting.job_compute`)

    def epoch_compute(self, rows: list[dict], epochs: int, first_client: int = 0) -> list[dict]:
        """Put an epoch's share of the grid's compute on the train rows of `chosen_history`.

        The grid's compute is PersFL's training: every student of the client's grid counts.
        Every epoch of the grid trains alike, so epochs 1 … E each get 1/E of it (nothing is
        sent or received).
        """
        out = []
        for row in rows:
            if row["split"] == "train" and row["round"] > 0 and self.steps is not None:
                c = row["client"] - first_client
                row = {**row, **dict(zip(TRAINING, (int(self.steps[c]) // epochs,
                                                    int(self.samples[c]) // epochs, 0, 0),
                                         strict=True))}
            out.append(row)
        return out


@torch.no_grad()
def teacher_logits(ctx: Context, teachers: Group, split: SplitData) -> Tensor:
    """Logits [N, K] of each client's teacher on that client's samples, computed once."""
    out = []
    for client in range(split.n_clients):
        x, _ = split.client(client)
        out.append(ctx.forward({k: v[client] for k, v in teachers.items()}, x))
    return torch.cat(out)


def run_grid(ctx: Context, trainer, data: FederatedData, teachers: Group, config: GridConfig
             ) -> GridResult:
    """Train C × |λ| × |T| students from their clients' teachers and choose one per client."""
    return run_grids(ctx, trainer, [data], [teachers], [config])[0]


def run_grids(ctx: Context, trainer, datas: Sequence[FederatedData], teachers: Sequence[Group],
              configs: Sequence[GridConfig]) -> list[GridResult]:
    """`run_grid` of K runs (a stage's seeds) as members of one job; each run's result as alone.

    Run k's students are members of the job beside the other runs' (`_joined`): each keeps its
    run's data, teacher and seed, a member's arithmetic does not depend on the others, and each
    run is scored and chooses apart, so every number is the one `run_grid` gives it alone.
    """
    pairs = configs[0].pairs
    device = datas[0].train.x.device
    runs = []
    for data in datas:
        clients = torch.arange(data.n_clients, device=device).repeat_interleave(len(pairs))
        hp = {"lam": torch.tensor([p[0] for p in pairs], device=device).repeat(data.n_clients),
              "temperature": torch.tensor([p[1] for p in pairs],
                                          device=device).repeat(data.n_clients)}
        runs.append((clients, hp, torch.full_like(clients, configs[0].epochs)))
    job, rows = _joined(ctx, datas, teachers, runs, configs)
    result = trainer.train(job)
    steps, samples = job_compute(ctx, job)
    out = []
    for data, config, (clients, hp, _), part in zip(datas, configs, runs, rows, strict=True):
        _check_finite(result.bad_step[part], clients + data.first_client, hp, config.lr)
        students = {k: v[part] for k, v in result.state["model"].items()}
        scores = _score(ctx, students, data, clients)
        chosen_index = _choose(scores, config.selection_split, data.n_clients, len(pairs))
        grid = [{"client": data.client_id(c), "lam": float(hp["lam"][m]),
                 "temperature": float(hp["temperature"][m]),
                 **{name: float(values[m]) for name, values in scores.items()}}
                for m, c in enumerate(clients.tolist())]
        out.append(GridResult(grid, [grid[int(m)] for m in chosen_index],
                              {k: v[chosen_index] for k, v in students.items()},
                              steps[part].view(data.n_clients, -1).sum(1),
                              samples[part].view(data.n_clients, -1).sum(1)))
    return out


def _joined(ctx: Context, datas: Sequence[FederatedData], teachers: Sequence[Group],
            runs: list[tuple[Tensor, dict[str, Tensor], Tensor]],
            configs: Sequence[GridConfig]) -> tuple[Job, list[slice]]:
    """One job of every run's students, run after run, and each run's rows of it.

    `runs[k]`: run k's clients (positions in `datas[k]`), per-member hyper-parameters and
    epochs. Run k's clients are joined after the runs before it (`members.concat`); its members
    read its teacher logits and keep its seed's mini-batch orders.
    """
    from pflpipe.engine.members import concat

    if any(dataclasses.replace(c, seed=0) != dataclasses.replace(configs[0], seed=0)
           for c in configs):
        raise ValueError("grids join as members only when they differ in the seed alone")
    data = datas[0] if len(datas) == 1 else concat(datas)
    offsets = [0, *itertools.accumulate(d.n_clients for d in datas)]
    clients = torch.cat([c + offsets[k] for k, (c, _, _) in enumerate(runs)])
    logits = torch.cat([teacher_logits(ctx, t, d.train) for d, t in zip(datas, teachers,
                                                                         strict=True)])
    model = {k: torch.cat([t[k][c] for t, (c, _, _) in zip(teachers, runs, strict=True)])
             for k in teachers[0]}
    counts = data.train.counts.cpu()[clients.cpu()]
    epochs = torch.cat([e for _, _, e in runs])
    config = configs[0]
    job = Job(
        state={"model": model}, train=("model",), objective=distill_objective(config.objective),
        data=data.train.with_extra(teacher_logits=logits), clients=clients,
        steps=steps_for_epochs(counts, config.batch_size, epochs.cpu()),
        lr={"model": torch.full((len(clients),), config.lr, device=clients.device)},
        batch_size=config.batch_size,
        # one mini-batch order per client, shared by its grid points: pairs differ only in (λ, T)
        seeds=[member_seed(cfg.seed, cfg.stream, d.client_id(c))
               for d, cfg, (c_run, _, _) in zip(datas, configs, runs, strict=True)
               for c in c_run.tolist()],
        hp={name: torch.cat([hp[name] for _, hp, _ in runs]) for name in runs[0][1]},
        optimizer=config.optimizer)
    sizes = list(itertools.accumulate(len(c) for c, _, _ in runs))
    return job, [slice(a, b) for a, b in zip([0, *sizes], sizes, strict=False)]


def chosen_history(ctx: Context, trainer, data: FederatedData, teachers: Group,
                   config: GridConfig, chosen: list[dict]) -> list[dict]:
    """Per-epoch scores of each client's chosen student (epoch 0: its teacher).

    The grid's training is replayed for 0, 1, …, E epochs with the chosen (λ, T): member (c, e)
    starts from client c's teacher with the grid's seed, so its mini-batches are the first e
    epochs of the grid's own and at e = E it is the chosen student. One job for every client and
    epoch, about (E + 1) / (2 |λ| |T|) of the grid's work. Rows: client, round (= epoch), split,
    loss, accuracy (none on train: the federated stages record a training loss only).
    """
    return chosen_histories(ctx, trainer, [data], [teachers], [config], [chosen])[0]


def chosen_histories(ctx: Context, trainer, datas: Sequence[FederatedData],
                     teachers: Sequence[Group], configs: Sequence[GridConfig],
                     chosen: Sequence[list[dict]]) -> list[list[dict]]:
    """`chosen_history` of K runs as members of one job (`run_grids`); each run's rows."""
    device = datas[0].train.x.device
    n_epochs = configs[0].epochs + 1
    runs = []
    for data, picked in zip(datas, chosen, strict=True):
        clients = torch.arange(data.n_clients, device=device).repeat_interleave(n_epochs)
        hp = {name: torch.tensor([picked[c][name] for c in clients.tolist()], device=device)
              for name in ("lam", "temperature")}   # `chosen` by position, like the clients
        runs.append((clients, hp, torch.arange(n_epochs, device=device).repeat(data.n_clients)))
    job, rows = _joined(ctx, datas, teachers, runs, configs)
    result = trainer.train(job)
    out = []
    for data, (clients, _, epochs), part in zip(datas, runs, rows, strict=True):
        students = {k: v[part] for k, v in result.state["model"].items()}
        scores = _score(ctx, students, data, clients)
        out.append([{"client": data.client_id(c), "round": int(e), "split": split,
                     "loss": float(scores[f"{split}_loss"][m]),
                     "accuracy": "" if split == "train" else float(scores[f"{split}_accuracy"][m])}
                    for m, (c, e) in enumerate(zip(clients.tolist(), epochs.tolist(),
                                                   strict=True))
                    for split in ("train", "val", "test")])
    return out


def _score(ctx: Context, students: Group, data: FederatedData,
           clients: Tensor) -> dict[str, Tensor]:
    scores = {}
    for split in ("train", "val", "test"):
        loss, accuracy = evaluate(ctx, lambda st, sh, x, c: c.forward(st["model"], x),
                                  {"model": students}, {}, data.split(split), clients)
        scores[f"{split}_loss"], scores[f"{split}_accuracy"] = loss, accuracy
    return scores


def _choose(scores: dict[str, Tensor], split: str, n_clients: int, n_pairs: int) -> Tensor:
    """Per client, the member with the best `split` accuracy; ties → lower loss → grid order."""
    accuracy = scores[f"{split}_accuracy"].view(n_clients, n_pairs).nan_to_num(-1.0)
    loss = scores[f"{split}_loss"].view(n_clients, n_pairs).nan_to_num(float("inf"))
    best_acc = accuracy.max(1, keepdim=True).values
    loss = torch.where(accuracy == best_acc, loss, float("inf"))
    best_loss = loss.min(1, keepdim=True).values
    order = torch.arange(n_pairs, device=loss.device).expand_as(loss)
    first = torch.where(loss == best_loss, order, n_pairs).min(1).values
    return torch.arange(n_clients, device=loss.device) * n_pairs + first


def _check_finite(bad_step: Tensor, clients: Tensor, hp: dict[str, Tensor], lr: float) -> None:
    bad = (bad_step >= 0).nonzero().flatten().tolist()
    if bad:
        m = bad[0]
        raise DivergenceError(
            f"client {int(clients[m])}, distillation (λ = {float(hp['lam'][m]):g}, "
            f"T = {float(hp['temperature'][m]):g}): loss became NaN or infinite after "
            f"{int(bad_step[m]) + 1} step(s) (learning rate {lr:g}); {len(bad)} student(s) "
            "diverged. Lower distillation.lr (or federation.lr).", client=int(clients[m]))
