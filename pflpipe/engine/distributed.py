"""A federation run as N processes, each training a contiguous shard of the clients.

Every rank holds the whole partition and runs the same round loop (:class:`Federation`); only
the per-client work is split. Each trainer call trains the rank's contiguous shard of the round's
members with the inner (batched) trainer and each evaluation scores the rank's shard; the shards
are then gathered (``all_gather``), so every rank holds every client's state and runs the same
dispatch, aggregate and server_step on the same numbers: stateful algorithms (SCAFFOLD's control
variates) need nothing special. Shards are cut where the cumulative work (optimizer steps, or
samples to score) crosses k/N of the total. Rank 0 alone writes checkpoints, so a rerun after any
worker was killed resumes from the last finished round.

:func:`launch` starts the N workers on this machine, torchrun-style (it hosts their TCP store
on 127.0.0.1; gloo on CPU, NCCL when every rank has a GPU of its own), relays rank 0's round
reports to the caller's ``on_round`` before the next round starts, and returns rank 0's result.
The worker entry, ``python -m pflpipe.engine.distributed TASK``, reads torchrun's environment,
and TASK is a store URI (a local folder, or an S3 prefix that workers in other pods can read), so
a Kubeflow Trainer job can run it in each pod (pflpipe.pipelines.trainjob; the component does not
submit that job yet: docs/cluster.md). The task is self-contained: `write_task` puts the files and
folders that ``make(*args)`` reads (the `pathlib.Path` arguments: the partition, a warm-start
checkpoint) into the task store, and each worker reads a copy of its own; the checkpoints rank
0 writes go to the stage's store, which must then be S3 too.
"""

import dataclasses
import hashlib
import io
import json
import logging
import os
import pickle
import queue
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

from pflpipe.data.files import load_tensors
from pflpipe.engine.checkpoint import to_cpu
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.evaluate import evaluate
from pflpipe.engine.federation import Federation, FederationResult, Plan
from pflpipe.engine.protocol import AlgorithmProtocol
from pflpipe.engine.trainer import Context, Job, TrainResult, chunk
from pflpipe.engine.tree import Group, Tree, tree_map
from pflpipe.errors import DataError, PflpipeError, StorageError, WorkerError
from pflpipe.events import round_progress
from pflpipe.layout import (
    WORKER_ERROR,
    WORKER_FILES,
    WORKER_RESULT,
    WORKER_TASK,
    worker_file,
    worker_task,
)
from pflpipe.storage import ENDPOINT_ENV, LocalStore, open_uri
from pflpipe.storage.store_protocol import Store

log = logging.getLogger(__name__)
#: Seconds between the launcher's looks at its workers.
_POLL_S = 0.1


@dataclass
class Recipe:
    """What a federation is built from, and the model it starts from."""

    algorithm: AlgorithmProtocol
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
    cumulative = work.cpu().double().cumsum(0)
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
           device: torch.device | None = None, threads: int = 1,
           task: Store | None = None) -> FederationResult:
    """Run ``make(*args)``'s federation as `workers` local processes; return rank 0's result.

    Each worker is ``python -m pflpipe.engine.distributed TASK`` with torchrun's environment
    (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and `threads` torch threads; `make` must be
    importable by name. The workers' own output lines repeat the caller's and are dropped.

    `task` is the store the task goes out and the result comes back through (TASK is its URI):
    a local temporary folder unless given (the workers then read make's paths where they are),
    e.g. `task_store` under the stage's checkpoint store when the store is S3 (what workers in
    other pods can read). A given store carries the files make reads too (`write_task`); the
    task, its files and the result are deleted once the workers succeed. The workers are given
    an S3 store's endpoint in their environment (`pflpipe.storage.ENDPOINT_ENV`).
    """
    if task is None:  # the workers share this machine's files: they read make's paths as they are
        with tempfile.TemporaryDirectory(prefix="pflpipe-workers-") as tmp:
            return _launch(workers, make, args, on_round, device, threads, LocalStore(tmp),
                           carry_files=False)
    result = _launch(workers, make, args, on_round, device, threads, task)
    for key in (WORKER_TASK, WORKER_RESULT, *task.list(WORKER_FILES)):
        task.delete(key)
    return result


def task_store(checkpoints: Store, make: Callable[..., Recipe], args: tuple) -> Store:
    """Where a stage's workers find ``make(*args)`` beside its checkpoints: ``workers/<digest>``.

    The digest is the task's own, so a rerun of the same task (after a worker died) reuses the
    prefix: `write_task` clears an earlier attempt's result and error. A launcher of workers
    elsewhere (a Trainer job) writes the task with `write_task`, starts the workers with the
    store's URI and, once they are done, takes rank 0's result with `read_result`.
    """
    digest = hashlib.sha256(pickle.dumps((make, args))).hexdigest()[:16]
    return checkpoints.child(worker_task(digest))


def write_task(task: Store, make: Callable[..., Recipe], args: tuple, *,
               carry_files: bool = True) -> None:
    """Write ``(make, args)`` for the workers into `task`, clearing an earlier attempt's result.

    With `carry_files`, each `pathlib.Path` in `args` (a file or folder that `make` reads) goes
    into `task` too, content-addressed under ``files/`` (a file already there is not written
    again), and each worker reads its own copy: workers in other pods need no file of this one.
    """
    # an earlier attempt's, which this one must not report
    for key in (WORKER_RESULT, WORKER_ERROR):
        task.delete(key)
    if carry_files:
        present = set(task.list(WORKER_FILES))
        args = tuple(_carry(task, arg, present) if isinstance(arg, Path) else arg for arg in args)
    task.put_bytes(WORKER_TASK, pickle.dumps((make, args)))


@dataclass(frozen=True)
class _Carried:
    """A file or folder of the launcher's in the task store: (relative path, key) per file."""

    source: str
    is_dir: bool
    files: tuple[tuple[str, str], ...]


def _carry(task: Store, path: Path, present: set[str]) -> _Carried:
    """Put the files of `path` into `task` under their SHA-256 unless `present` has them."""
    if not path.exists():
        raise DataError(f"{path} does not exist; the sharded stage's workers are given a copy "
                        "of each file and folder its arguments name")
    members = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    files = []
    for member in members:
        data = member.read_bytes()
        key = worker_file(hashlib.sha256(data).hexdigest())
        if key not in present:
            task.put_bytes(key, data)
            present.add(key)
        files.append((member.relative_to(path).as_posix() if path.is_dir() else "", key))
    return _Carried(str(path), path.is_dir(), tuple(files))


def _fetch(task: Store, carried: _Carried, into: Path, rank: int) -> Path:
    """Write a worker's copy of `carried` into `into`; exit naming the object if one is missing."""
    copy = into / Path(carried.source).name
    if carried.is_dir:
        copy.mkdir(parents=True)
    for relative, key in carried.files:
        target = copy / relative if relative else copy
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.write_bytes(task.get_bytes(key))
        except FileNotFoundError:
            source = "/".join(filter(None, [carried.source, relative]))
            sys.exit(f"worker {rank}: {task.uri}/{key} (a copy of the launcher's {source}) is "
                     "missing from its task; write the task again before starting the workers")
        except StorageError as err:
            sys.exit(f"worker {rank}: could not read {task.uri}/{key}: {err}")
    return copy


def read_result(task: Store, device: torch.device | None = None) -> FederationResult:
    """Rank 0's result in `task`; the library error a worker left there instead is raised."""
    if task.exists(WORKER_ERROR):
        raise pickle.loads(task.get_bytes(WORKER_ERROR))
    fields = load_tensors(io.BytesIO(task.get_bytes(WORKER_RESULT)),
                          "the result of the sharded federation", device or torch.device("cpu"),
                          f"{task.uri}/{WORKER_RESULT}")
    return FederationResult(**fields)


def _launch(workers: int, make, args: tuple, on_round, device: torch.device | None,
            threads: int, task: Store, carry_files: bool = True) -> FederationResult:
    write_task(task, make, args, carry_files=carry_files)
    # The launcher hosts the rendezvous store, as torchrun's agent does: its port is bound from
    # the start, so no other process can take it between choosing it and the workers' start.
    rendezvous = dist.TCPStore("127.0.0.1", 0, workers, is_master=True, wait_for_workers=False)
    env = {**os.environ, "WORLD_SIZE": str(workers), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(rendezvous.port), "TORCHELASTIC_USE_AGENT_STORE": "True",
           "TORCHELASTIC_RESTART_COUNT": "0",   # older torch reads it beside the flag
           "PFLPIPE_WORKER_THREADS": str(threads), _ACK: "1"}
    if getattr(task, "endpoint_url", None):
        env[ENDPOINT_ENV[0]] = task.endpoint_url
    reports, report_fd = os.pipe()  # rank 0's round reports: JSON lines, not its stdout
    processes = [subprocess.Popen(
        [sys.executable, "-m", __name__, task.uri],
        env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank),
             **({_REPORT_FD: str(report_fd)} if rank == 0 else {})}, text=True,
        stdin=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, pass_fds=(report_fd,) if rank == 0 else ())
        for rank in range(workers)]
    os.close(report_fd)
    try:
        with os.fdopen(reports, encoding="utf-8") as stream:
            codes = _supervise(processes, stream, on_round)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    if any(codes):
        _raise_failure(task, codes)
    return read_result(task, device)


#: Set by `launch`: rank 0 reports each round as a JSON line ``{"round": r, "rows": [...]}`` on
#: the pipe whose descriptor `_REPORT_FD` names, and waits for its acknowledgement on stdin.
#: Without them (a Trainer job's pods) rank 0 writes a progress event per round into the pod's
#: log (`pflpipe.events`, what a stage's runner reads) and goes on.
_ACK, _REPORT_FD = "PFLPIPE_WORKER_ACK", "PFLPIPE_WORKER_REPORT_FD"


def _supervise(processes: list[subprocess.Popen], reports, on_round) -> list[int | None]:
    """Relay rank 0's round `reports` (acknowledged, so round r+1 starts after `on_round`).

    Returns the workers' exit codes once every worker has exited, or as soon as one has failed.
    """
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(reports, lines), daemon=True)
    reader.start()
    while True:
        codes = [process.poll() for process in processes]
        if all(code == 0 for code in codes) or any(code not in (None, 0) for code in codes):
            return codes
        try:
            line = lines.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if line is None:
            continue
        report = json.loads(line)
        if on_round is not None:
            on_round(report["round"], report["rows"])
        processes[0].stdin.write("\n")
        processes[0].stdin.flush()


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _raise_failure(task: Store, codes: list[int | None]) -> None:
    """Raise the library error a worker sent, else a WorkerError naming a worker that failed.

    A worker killed by a signal is named before one that exited with an error (its peers fail
    when they lose it).
    """
    if task.exists(WORKER_ERROR):
        raise pickle.loads(task.get_bytes(WORKER_ERROR))
    failed = sorted((code > 0, rank, code) for rank, code in enumerate(codes) if code)
    _, rank, code = failed[0]
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    raise WorkerError(
        f"worker {rank} of the sharded stage {how}; the other workers were stopped. "
        "Finished rounds are checkpointed: run the stage again to resume from the last one")


def worker(uri: str) -> None:
    """One rank (torchrun's environment): join the group, build the recipe, train its shards.

    The task comes from the store at `uri` (`pflpipe.storage.open_uri`: a local folder or an S3
    prefix). Rank 0 reports each round to `launch` on its report pipe and waits for the
    acknowledgement (started by a Trainer job, it writes a progress event per round into the
    pod's log instead: `pflpipe.events`), and writes the result there; a library error is
    written there for the launcher to raise as it is. The files the task carries
    (`write_task`) are copied into a temporary folder for `make` to read. A task or carried file
    that cannot be read stops the worker, before it joins the group, with a message naming the
    URI.
    """
    rank, workers = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    copies = tempfile.TemporaryDirectory(prefix="pflpipe-worker-")
    task, make, args = _read_task(uri, rank, Path(copies.name))
    use_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= workers
    if use_gpus:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl" if use_gpus else "gloo", init_method="env://")
    try:
        with copies:  # `make` loads what it reads
            recipe = make(*args)
        _check_store(task, recipe)
        torch.set_num_threads(int(os.environ.get("PFLPIPE_WORKER_THREADS", "1")))
        report = ((_report if os.environ.get(_ACK) == "1" else round_progress(recipe.plan.rounds))
                  if rank == 0 else None)
        result = recipe.run(report, cls=ShardedFederation)
        if rank == 0:
            buffer = io.BytesIO()
            torch.save(to_cpu(dataclasses.asdict(result)), buffer)
            task.put_bytes(WORKER_RESULT, buffer.getvalue())
    except PflpipeError as err:
        task.put_bytes(WORKER_ERROR, pickle.dumps(err))
        sys.exit(1)
    finally:
        dist.destroy_process_group()


def _check_store(task: Store, recipe: Recipe) -> None:
    """Refuse checkpoints in a local folder when the task is not: the launcher cannot read it."""
    if isinstance(recipe.store, LocalStore) and not isinstance(task, LocalStore):
        raise StorageError(f"the workers' task is in {task.uri} but the stage checkpoints into "
                           f"the local folder {recipe.store.root}, which a launcher in another "
                           "pod cannot read; use S3 storage (storage.kind: s3)")


def _read_task(uri: str, rank: int, copies: Path) -> tuple[Store, Callable[..., Recipe], tuple]:
    """The task's store and ``(make, args)``, its carried files copied into `copies`.

    Exit with a message naming `uri` (or the missing file's object) if unreadable.
    """
    where = f"{uri.rstrip('/')}/{WORKER_TASK}"
    try:
        task = open_uri(uri)
        make, args = pickle.loads(task.get_bytes(WORKER_TASK))
    except FileNotFoundError:
        sys.exit(f"worker {rank}: no task at {where}; the stage that launches the workers writes "
                 "it before it starts them (is TASK the launcher's URI, and its store this one?)")
    except (StorageError, ValueError) as err:
        sys.exit(f"worker {rank}: could not read its task {where}: {err}")
    return task, make, tuple(_fetch(task, arg, copies / str(i), rank)
                             if isinstance(arg, _Carried) else arg for i, arg in enumerate(args))


def _report(round_idx: int, rows: list[dict]) -> None:
    with os.fdopen(int(os.environ[_REPORT_FD]), "w", encoding="utf-8", closefd=False) as pipe:
        pipe.write(json.dumps({"round": round_idx, "rows": rows}) + "\n")
    if not sys.stdin.readline():  # the launcher is gone: stop rather than train unwatched
        sys.exit(f"worker 0: the stage that launched it ended; stopped after round {round_idx}")


if __name__ == "__main__":
    from pflpipe.engine import distributed  # the module itself, not a second copy as __main__
    from pflpipe.events import addressed_to

    with addressed_to("runner"):  # a Trainer job's rank 0 writes progress events to its log
        distributed.worker(sys.argv[1])
