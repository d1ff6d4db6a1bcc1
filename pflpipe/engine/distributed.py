"""A federation run as N processes, each training a contiguous shard of the clients.

Every rank holds the whole partition and runs the same round loop (:class:`Federation`); only
the per-client work is split. Each trainer call trains the rank's contiguous shard of the round's
members with the inner (batched) trainer and each evaluation scores the rank's shard; the shards
are then gathered (``all_gather``), so every rank holds every client's state and runs the same
dispatch, aggregate and server_step on the same numbers: stateful algorithms (SCAFFOLD's control
variates) need nothing special. Shards are cut where the cumulative work (optimizer steps, or
samples to score) crosses k/N of the total. Rank 0 alone writes checkpoints, so a rerun after any
worker was killed resumes from the last finished round.

:func:`launch` starts the N workers on this machine, torchrun-style (a TCP store on 127.0.0.1;
gloo on CPU, NCCL when every rank has a GPU of its own), relays rank 0's round reports to the
caller's ``on_round`` before the next round starts, and returns rank 0's result. The worker
entry, ``python -m pflpipe.engine.distributed TASK``, reads torchrun's environment, so a Kubeflow
Trainer job can run it in each pod (pflpipe.pipelines.trainjob; the component does not submit
that job yet, and TASK is a local folder: docs/cluster.md).
"""

import dataclasses
import json
import logging
import os
import pickle
import queue
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor

from pflpipe.algorithms.base import Algorithm
from pflpipe.data.files import load_tensors
from pflpipe.engine.checkpoint import to_cpu
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.evaluate import evaluate
from pflpipe.engine.federation import Federation, FederationResult, Plan
from pflpipe.engine.trainer import Context, Job, TrainResult, chunk
from pflpipe.engine.tree import Group, Tree, tree_map
from pflpipe.errors import PflpipeError, WorkerError
from pflpipe.storage.base import Store

log = logging.getLogger(__name__)
#: Seconds between the launcher's looks at its workers.
_POLL_S = 0.1


@dataclass
class Recipe:
    """What a federation is built from, and the model it starts from."""

    algorithm: Algorithm
    ctx: Context
    data: FederatedData
    trainer: object
    plan: Plan
    store: Store | None
    fingerprint: str
    init: Group

    def run(self, on_round: Callable[[int, list[dict]], None] | None = None,
            cls: type[Federation] = Federation) -> FederationResult:
        """Run the rounds in this process (`cls`: the federation class)."""
        return cls(self.algorithm, self.ctx, self.data, self.trainer, self.plan, self.store,
                   self.fingerprint, on_round).run(self.init)


def shard_bounds(work: Tensor, parts: int) -> list[int]:
    """Bounds [parts + 1] of contiguous shards whose summed `work` [M] is as even as possible."""
    cumulative = work.double().cumsum(0)
    if not len(work):
        return [0] * (parts + 1)
    targets = cumulative[-1] * torch.arange(1, parts, dtype=torch.double) / parts
    cuts = (torch.searchsorted(cumulative, targets) + 1).clamp_max(len(work)).tolist()
    return [0, *cuts, len(work)]


def gather_rows(local: Tensor, bounds: list[int]) -> Tensor:
    """Every rank's shard of a stacked tensor, concatenated in rank order [bounds[-1], ...]."""
    sizes = [stop - start for start, stop in zip(bounds, bounds[1:], strict=False)]
    staged = local if dist.get_backend() == "nccl" else local.cpu()
    padded = staged.new_zeros((max(sizes), *local.shape[1:]))
    padded[:len(local)] = staged
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)]).to(
        local.device)


def _my_shard(bounds: list[int]) -> slice:
    rank = dist.get_rank()
    return slice(bounds[rank], bounds[rank + 1])


class ShardedTrainer:
    """Trains this rank's shard of every job with `inner`; returns every member's result."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def ctx(self) -> Context:
        """The inner trainer's context (a federation with extra networks replaces it)."""
        return self.inner.ctx

    @ctx.setter
    def ctx(self, ctx: Context) -> None:
        self.inner.ctx = ctx

    def train(self, job: Job) -> TrainResult:
        """Train this rank's members, then gather all members' state, loss and bad step."""
        bounds = shard_bounds(job.steps.clamp_min(1), dist.get_world_size())
        mine = _my_shard(bounds)
        if mine.stop > mine.start:
            part = self.inner.train(chunk(job, mine.start, mine.stop))
        else:
            device = job.data.x.device
            part = TrainResult(tree_map(lambda t: t[:0], job.state), torch.zeros(0, device=device),
                               torch.zeros(0, dtype=torch.long, device=device))
        return TrainResult(tree_map(lambda t: gather_rows(t, bounds), part.state),
                           gather_rows(part.loss, bounds), gather_rows(part.bad_step, bounds))


class ShardedFederation(Federation):
    """A federation whose ranks share the client work; rank 0 writes the checkpoints."""

    def __init__(self, algorithm, ctx, data, trainer, plan, store=None, fingerprint="",
                 on_round=None):
        super().__init__(algorithm, ctx, data, ShardedTrainer(trainer), plan, store, fingerprint,
                         on_round if dist.get_rank() == 0 else None)

    def score(self, ctx, predict, state: Tree, shared: Tree, split: SplitData, clients: Tensor,
              keys: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Score this rank's shard of the members, then gather every member's loss and accuracy."""
        counts = split.counts[clients.to(split.offsets.device)]
        bounds = shard_bounds(counts + 1, dist.get_world_size())
        mine = _my_shard(bounds)
        loss, accuracy = evaluate(ctx, predict, tree_map(lambda t: t[mine], state), shared, split,
                                  clients[mine], keys=None if keys is None else keys[mine])
        return gather_rows(loss, bounds), gather_rows(accuracy, bounds)

    def _save(self, snap: dict, round_idx: int) -> None:
        if dist.get_rank() == 0:
            super()._save(snap, round_idx)

    def _keep(self, global_params: Tree, round_idx: int) -> None:
        if dist.get_rank() == 0:
            super()._keep(global_params, round_idx)


# ---- launching ----------------------------------------------------------------------------
def launch(workers: int, make: Callable[..., Recipe], args: tuple,
           on_round: Callable[[int, list[dict]], None] | None = None,
           device: torch.device | None = None, threads: int = 1) -> FederationResult:
    """Run ``make(*args)``'s federation as `workers` local processes; return rank 0's result.

    Each worker is ``python -m pflpipe.engine.distributed TASK`` with torchrun's environment
    (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and `threads` torch threads; `make` must be
    importable by name. The workers' own output lines repeat the caller's and are dropped.
    """
    with tempfile.TemporaryDirectory(prefix="pflpipe-workers-") as tmp:
        task = Path(tmp)
        (task / _TASK).write_bytes(pickle.dumps((make, args)))
        env = {**os.environ, "WORLD_SIZE": str(workers), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(_free_port()), "PFLPIPE_WORKER_THREADS": str(threads)}
        processes = [subprocess.Popen(
            [sys.executable, "-m", __name__, str(task)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}, text=True,
            stdin=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
            stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL)
            for rank in range(workers)]
        try:
            codes = _supervise(processes, on_round)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                process.wait()
        _raise_failure(task, codes)
        fields = load_tensors(task / _RESULT, "the result of the sharded federation",
                              device or torch.device("cpu"), str(task / _RESULT))
    return FederationResult(**fields)


_TASK, _RESULT, _ERROR, _ROUND = "task.pkl", "result.pt", "error.pkl", "pflpipe-worker round "


def _supervise(processes: list[subprocess.Popen], on_round) -> list[int | None]:
    """Relay rank 0's round reports (acknowledged, so round r+1 starts after `on_round`).

    Returns the workers' exit codes once every worker has exited, or as soon as one has failed.
    """
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(processes[0].stdout, lines), daemon=True)
    reader.start()
    while True:
        codes = [process.poll() for process in processes]
        if all(code == 0 for code in codes) or any(code not in (None, 0) for code in codes):
            return codes
        try:
            line = lines.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if line is None or not line.startswith(_ROUND):
            continue
        round_idx, rows = json.loads(line[len(_ROUND):])
        if on_round is not None:
            on_round(round_idx, rows)
        processes[0].stdin.write("\n")
        processes[0].stdin.flush()


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _raise_failure(task: Path, codes: list[int | None]) -> None:
    """Raise the library error a worker sent, else a WorkerError naming the worker that died.

    A worker killed by a signal is named before one that exited with an error (its peers fail
    when they lose it).
    """
    if (task / _ERROR).exists():
        raise pickle.loads((task / _ERROR).read_bytes())
    failed = sorted((code > 0, rank, code) for rank, code in enumerate(codes) if code)
    if failed:
        _, rank, code = failed[0]
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise WorkerError(
            f"worker {rank} of the sharded stage {how}; the other workers were stopped. "
            "Finished rounds are checkpointed: run the stage again to resume from the last one")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def worker(task: Path) -> None:
    """One rank (torchrun's environment): join the group, build the recipe, train its shards.

    Rank 0 reports each round on stdout and waits for the launcher's acknowledgement, and saves
    the result; a library error is saved for the launcher to raise as it is.
    """
    rank, workers = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    use_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= workers
    if use_gpus:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl" if use_gpus else "gloo", init_method="env://")
    try:
        make, args = pickle.loads((task / _TASK).read_bytes())
        recipe = make(*args)
        torch.set_num_threads(int(os.environ.get("PFLPIPE_WORKER_THREADS", "1")))
        result = recipe.run(_report if rank == 0 else None, cls=ShardedFederation)
        if rank == 0:
            torch.save(to_cpu(dataclasses.asdict(result)), task / _RESULT)
    except PflpipeError as err:
        (task / _ERROR).write_bytes(pickle.dumps(err))
        sys.exit(1)
    finally:
        dist.destroy_process_group()


def _report(round_idx: int, rows: list[dict]) -> None:
    print(_ROUND + json.dumps([round_idx, rows]), flush=True)
    if not sys.stdin.readline():  # the launcher is gone: stop rather than train unwatched
        sys.exit(f"worker 0: the stage that launched it ended; stopped after round {round_idx}")


if __name__ == "__main__":
    from pflpipe.engine import distributed  # the module itself, not a second copy as __main__

    distributed.worker(Path(sys.argv[1]))
