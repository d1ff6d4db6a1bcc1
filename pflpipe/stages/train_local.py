"""Stage `train_local`: the local-only baseline.

Every client trains alone from the seeded initial model; its model is the epoch best on its
validation split (its last epoch without one).
"""

from pathlib import Path

from pflpipe.stages import personalize
from pflpipe.tracking import NULL_TRACKER, Tracker


def run(spec, seed: int, partition_dir: Path, results_dir: Path, *,
        tracker: Tracker = NULL_TRACKER, progress: bool = False,
        resume: str = "all", shard: int | None = None) -> personalize.PersonalizeResult:
    """Train the local baseline; write its results directory (model name `local`).

    With `shard` = k, only the k-th of `engine.shards` client shards
    (`pflpipe.stages.merge_shards`).
    """
    return personalize.run(spec, seed, spec.local_params.display_name, partition_dir, None,
                           results_dir, tracker=tracker, stage="train_local", progress=progress,
                           resume=resume, shard=shard)


def run_members(spec, seeds: list[int], partition_dirs: list[Path], results_dirs: list[Path], *,
                tracker: Tracker = NULL_TRACKER, progress: bool = False, resume: str = "all"
                ) -> list[personalize.PersonalizeResult]:
    """`run` of every seed of `seeds` as members of one federation (the same results)."""
    return personalize.run_members(spec, seeds, spec.local_params.display_name, partition_dirs,
                                   None, results_dirs, tracker=tracker, stage="train_local",
                                   progress=progress, resume=resume)
