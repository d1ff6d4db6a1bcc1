"""Stage `collect_members`: one seed's results, collected from the `train_members` output.

When `train_members` trains every task of every seed (`pflpipe.stages.train_members.whole`),
the seeds loop starts no task that would find its work done: this stage gathers the seed's
results directories from the train_members output as `collect_results` gathers them from the
seed's tasks, into the same results directory.
"""

from pathlib import Path

from pflpipe.stages import collect_results, train_members


def run(spec, seed: int, members_dir: Path, out_dir: Path) -> collect_results.CollectedResults:
    """`collect_results.run` of the seed's directories in `members_dir` (`train_members.run`)."""
    partition, checkpoints, results = train_members.seed_results(spec, members_dir, seed)
    return collect_results.run(spec, seed, results, Path(out_dir), partition_dir=partition,
                               checkpoints_dir=checkpoints)
