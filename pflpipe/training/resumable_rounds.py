"""A training stage's checkpoints and rounds.

Where the checkpoints are kept, whether a rerun resumes from them, and running the rounds (here,
or as `engine.workers` processes).
"""

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import torch

from pflpipe import layout
from pflpipe.data.files import load_tensors
from pflpipe.engine import checkpoint, distributed
from pflpipe.engine.distributed import Recipe
from pflpipe.engine.federation import FederationResult
from pflpipe.engine.tree import Group
from pflpipe.events import notice
from pflpipe.layout import round_file
from pflpipe.storage import Store, open_store

#: Version of what the engine checkpoints; a new one never resumes from an older one's files.
CHECKPOINT_FORMAT = 3   # 3: the engine's train rows carry compute and diagnostics


#: Which of an earlier run's checkpoints a training stage resumes from (`pflpipe run` flags):
#: all of them (default: finished ones are reused as they are), only unfinished ones (finished
#: stages are recomputed: --no-cache) or none (--fresh).
RESUME = ("all", "unfinished", "none")


def checkpoint_store(spec, stage: str, key: dict) -> tuple[Store, str]:
    """The stable store a stage checkpoints into (so a rerun resumes), and its key.

    The key hashes everything the stage's result depends on: the same inputs find the same
    checkpoints, other inputs get a fresh directory.
    """
    key = {**key, "checkpoint_format": CHECKPOINT_FORMAT}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    root = open_store(spec.storage, default_root=spec.experiment.results_dir)
    return root.child(layout.stage_checkpoints(stage, digest)), digest


def use_checkpoints(store: Store, resume: str, rounds: int) -> str:
    """Keep or discard an earlier run's checkpoints as `resume` (one of `RESUME`) says; note it.

    Returns what the stage does: "fresh" (from round 0), "resumed" or "reused" (its finished
    checkpoints: nothing to train).
    """
    if resume not in RESUME:
        raise ValueError(f"resume must be one of {RESUME} (got {resume!r})")
    progress = checkpoint.progress_of(store)
    if progress is None:
        return "fresh"
    done = int(progress["rounds_completed"])
    finished = done >= rounds or bool(progress.get("stopped_early"))
    if resume == "none" or (resume == "unfinished" and finished):
        for name in store.list():
            store.delete(name)
        why = "--fresh" if resume == "none" else "--no-cache recomputes finished stages"
        notice(f"recomputed: discarded the checkpoints of round {done}/{rounds} ({why})")
        return "fresh"
    if finished:
        notice(f"reused finished checkpoints (round {done}/{rounds}): nothing trained",
               reused=True)
        return "reused"
    notice(f"resumed from round {done}/{rounds}")
    return "resumed"


def federate(spec, recipe: Recipe, make: Callable[..., Recipe], args: tuple,
             on_round: Callable[[int, list[dict]], None] | None = None) -> FederationResult:
    """Run `recipe`'s rounds here, or as `engine.workers` processes sharing the clients.

    The workers build their own recipe with ``make(*args)`` (a module-level function); the
    `Path`s among `args` are all the files it reads (a task in a store carries them:
    `distributed.write_task`).
    """
    workers = spec.engine.workers
    if workers == 1:
        return recipe.run(on_round)
    threads = max(1, torch.get_num_threads() // workers)
    notice(f"{workers} workers, each training a shard of the clients with {threads} torch "
           f"thread{'s' if threads > 1 else ''}")
    return distributed.launch(workers, make, args, on_round, recipe.data.train.x.device, threads)


def load_round(directory: Path, round_idx: int, device: torch.device) -> Group:
    """The global state_dict of one round from a checkpoint directory."""
    return load_tensors(round_file(directory, round_idx), f"the state_dict of round {round_idx}",
                        map_location=device)
