"""PersFL stage 2: every client distils its teacher into a student for every (λ, T) of the grid.

All clients × all grid points are trained at once on the engine; each client keeps the pair that
scores best on the selection split (thesis Alg. 1 lines 12-25).
"""

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
    pairs, n_clients = config.pairs, data.n_clients
    device = data.train.x.device
    clients = torch.arange(n_clients, device=device).repeat_interleave(len(pairs))
    hp = {"lam": torch.tensor([p[0] for p in pairs], device=device).repeat(n_clients),
          "temperature": torch.tensor([p[1] for p in pairs], device=device).repeat(n_clients)}
    job = _job(ctx, data, teachers, clients, hp, torch.full_like(clients, config.epochs), config)
    result = trainer.train(job)
    _check_finite(result.bad_step, clients + data.first_client, hp, config.lr)
    students = result.state["model"]
    scores = _score(ctx, students, data, clients)
    chosen_index = _choose(scores, config.selection_split, n_clients, len(pairs))
    grid = [{"client": data.client_id(c), "lam": float(hp["lam"][m]),
             "temperature": float(hp["temperature"][m]),
             **{name: float(values[m]) for name, values in scores.items()}}
            for m, c in enumerate(clients.tolist())]
    chosen = [grid[int(m)] for m in chosen_index]
    steps, samples = job_compute(ctx, job)
    return GridResult(grid, chosen, {k: v[chosen_index] for k, v in students.items()},
                      steps.view(n_clients, -1).sum(1), samples.view(n_clients, -1).sum(1))


def _job(ctx: Context, data: FederatedData, teachers: Group, clients: Tensor,
         hp: dict[str, Tensor], epochs: Tensor, config: GridConfig) -> Job:
    """Students of `clients` (one per member) starting from their client's teacher."""
    counts = data.train.counts.cpu()[clients.cpu()]
    return Job(
        state={"model": {k: v[clients] for k, v in teachers.items()}},
        train=("model",), objective=distill_objective(config.objective),
        data=data.train.with_extra(teacher_logits=teacher_logits(ctx, teachers, data.train)),
        clients=clients, steps=steps_for_epochs(counts, config.batch_size, epochs.cpu()),
        lr={"model": torch.full((len(clients),), config.lr, device=clients.device)},
        batch_size=config.batch_size,
        # one mini-batch order per client, shared by its grid points: pairs differ only in (λ, T)
        seeds=[member_seed(config.seed, config.stream, data.client_id(c))
               for c in clients.tolist()],
        hp=hp, optimizer=config.optimizer)


def chosen_history(ctx: Context, trainer, data: FederatedData, teachers: Group,
                   config: GridConfig, chosen: list[dict]) -> list[dict]:
    """Per-epoch scores of each client's chosen student (epoch 0: its teacher).

    The grid's training is replayed for 0, 1, …, E epochs with the chosen (λ, T): member (c, e)
    starts from client c's teacher with the grid's seed, so its mini-batches are the first e
    epochs of the grid's own and at e = E it is the chosen student. One job for every client and
    epoch, about (E + 1) / (2 |λ| |T|) of the grid's work. Rows: client, round (= epoch), split,
    loss, accuracy (none on train: the federated stages record a training loss only).
    """
    device = data.train.x.device
    n_epochs = config.epochs + 1
    clients = torch.arange(data.n_clients, device=device).repeat_interleave(n_epochs)
    epochs = torch.arange(n_epochs, device=device).repeat(data.n_clients)
    hp = {name: torch.tensor([chosen[c][name] for c in clients.tolist()], device=device)
          for name in ("lam", "temperature")}   # `chosen` by position, like the clients
    result = trainer.train(_job(ctx, data, teachers, clients, hp, epochs, config))
    scores = _score(ctx, result.state["model"], data, clients)
    return [{"client": data.client_id(c), "round": int(e), "split": split,
             "loss": float(scores[f"{split}_loss"][m]),
             "accuracy": "" if split == "train" else float(scores[f"{split}_accuracy"][m])}
            for m, (c, e) in enumerate(zip(clients.tolist(), epochs.tolist(), strict=True))
            for split in ("train", "val", "test")]


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
