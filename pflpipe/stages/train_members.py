"""Stage `train_members`: the spec's seeds as members of one federation, stage by stage.

With `engine.seeds_as_members`, this task runs before the seeds loop. Each training stage it can
group (warm_start_fedavg, train_local, every untuned personalize entry) trains all the spec's
seeds as members of one batched federation (`pflpipe.engine.members`) and leaves each seed's
final checkpoint in that seed's own checkpoint store, as the seed's own run leaves it. The seeds
loop then runs as without the switch: each seed's task finds its checkpoints finished, trains
nothing and writes its results directory: the same files, to the bit. A stage it cannot group
trains in the seeds loop as before; `groups` says which and why (`pflpipe validate` prints it).
"""

from dataclasses import dataclass, field
from pathlib import Path

from pflpipe import layout
from pflpipe.errors import DataError
from pflpipe.events import notice
from pflpipe.stages import partition_data, personalize, train_local, warm_start_fedavg

STAGE = "train_members"


@dataclass
class MembersResult:
    """What was trained as members, and what was left to the seeds loop (with why)."""

    seeds: list[int]
    grouped: list[str] = field(default_factory=list)
    per_seed: dict[str, str] = field(default_factory=dict)

    def to_markdown(self) -> str:
        """One paragraph for the KFP Markdown artifact."""
        left = "".join(f"\n- {task}: per seed ({why})" for task, why in self.per_seed.items())
        grouped = ", ".join(self.grouped) or "nothing"
        return (f"**train_members**: seeds {self.seeds} as members of one federation: "
                f"{grouped}.{left}\n")


def task_names(spec) -> list[str]:
    """The training tasks of one seed that `train_members` may group, in the order it runs them."""
    names = ["warm_start_fedavg", *(["train_local"] if spec.runs_local else [])]
    return names + [f"personalize[{entry.display_name}]" for entry in spec.personalization
                    if entry.stage == "personalize"]


def groups(spec, specs: dict[str, object] | None = None) -> tuple[list[str], dict[str, str]]:
    """The tasks trained as members, and the others with the reason.

    The tasks are `spec`'s (`task_names`), or the keys of `specs`, each judged by its own spec.
    What the spec alone decides; seeds with unequal client counts are found when partitioned.
    """
    grouped, per_seed = [], {}
    for name in task_names(spec) if specs is None else [n for n in specs if n != "partition_data"]:
        why = _per_seed_reason(spec if specs is None else specs[name], name)
        if why is None:
            grouped.append(name)
        else:
            per_seed[name] = why
    if spec.has_persfl and specs is None:
        per_seed["select_teachers, distill_grid_search"] = "not grouped yet"
    return grouped, per_seed


def _per_seed_reason(spec, name: str) -> str | None:
    """Why the task `name` of `spec` trains per seed; None when it trains as members."""
    from pflpipe.algorithms import REGISTRY, Algorithm

    fed, label = spec.federation, name.removeprefix("personalize[").removesuffix("]")
    if len(spec.experiment.seeds) < 2:
        return "one seed"
    if fed.server_optimizer.name != "fedavg" or fed.server_optimizer.server_lr != 1.0:
        return "federation.server_optimizer"
    if name == "warm_start_fedavg":
        return "federation.early_stop: each seed stops on its own" if fed.early_stop else None
    entry = spec.local_params if name == "train_local" else spec.algorithm(label)
    if spec.tuning and spec.tuning.find(label):
        return "tuned: its setting is chosen by the tune stage"
    if REGISTRY[entry.name].modules is not Algorithm.modules:
        return f"{entry.name} builds networks of its own"
    return None


def run(specs: dict[str, object], out_dir: Path, *, resume: str = "all",
        progress: bool = False) -> MembersResult:
    """Train the grouped tasks of `specs` as members; each seed's directories under `out_dir`.

    ``out_dir/seed-<s>/`` holds the seed's partition, warm-start checkpoints and a results
    directory per grouped task (named as the task), as its own tasks write them.

    `specs` maps each task to group (of `task_names`), and "partition_data", to the spec it
    runs with (the pipeline's scoped specs, so the checkpoints are those its per-seed tasks
    look for; each with the experiment's seeds).
    """
    base = specs["warm_start_fedavg"]
    seeds = list(base.experiment.seeds)
    grouped, per_seed = groups(base, specs)
    result = MembersResult(seeds, per_seed=dict(per_seed))
    if not grouped:
        return result
    dirs = {seed: Path(out_dir) / layout.seed_folder(seed) for seed in seeds}
    parts = [dirs[s] / layout.PARTITIONS for s in seeds]
    for seed, part in zip(seeds, parts, strict=True):
        partition_data.run(specs["partition_data"], seed, part)
    checkpoints = [dirs[s] / layout.CHECKPOINTS for s in seeds]
    for name in grouped:
        spec, label = specs[name], name.removeprefix("personalize[").removesuffix("]")
        outs = [dirs[s] / name for s in seeds]
        try:
            if name == "warm_start_fedavg":
                warm_start_fedavg.run_members(spec, seeds, parts, checkpoints, outs,
                                              progress=progress, resume=resume)
            elif name == "train_local":
                train_local.run_members(spec, seeds, parts, outs, progress=progress,
                                        resume=resume)
            elif "warm_start_fedavg" in result.grouped or (
                    spec.algorithm(label).warm_start == "none"):
                personalize.run_members(spec, seeds, label, parts, checkpoints, outs,
                                        progress=progress, resume=resume)
            else:
                raise DataError("it starts from the warm start, which trained per seed")
        except DataError as err:
            notice(f"{name} trains per seed: {err}")
            result.per_seed[name] = str(err)
            continue
        result.grouped.append(name)
    return result
