"""Stage `train_members`: the spec's seeds as members of one federation, stage by stage.

With `engine.seeds_as_members`, this task runs before the seeds loop. Each training stage it can
group (warm_start_fedavg, train_local, every untuned personalize entry) trains all the spec's
seeds as members of one batched federation (`pflpipe.engine.members`) and leaves each seed's
final checkpoint in that seed's own checkpoint store, as the seed's own run leaves it. The seeds
loop then runs as without the switch: each seed's task finds its checkpoints finished, trains
nothing and writes its results directory: the same files, to the bit. A stage it cannot group
trains in the seeds loop as before; `groups` says which and why (`pflpipe validate` prints it).

Personalize entries of one algorithm that differ only in hyper-parameters it can take per member
(its `member_params`: Ditto's λ, FedProx's μ, pFedMe's β, …; `pflpipe.engine.variants`), or in
label and warm start, train together: every entry × every seed as members of one federation, a
unit named by its tasks joined with " + ". Entries that differ in anything else (a step count, a
learning rate, a value that is not a plain factor) train apart; `apart` says why.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from pflpipe import layout
from pflpipe.errors import DataError
from pflpipe.events import notice

STAGE = "train_members"
#: Joins the tasks of a unit trained together (hyper-parameter variants of one algorithm).
JOINED = " + "
#: PersFL's unit, after the warm start: every seed's teachers, then their grids as one job.
DISTILL = "select_teachers, distill_grid_search"


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


def point_name(label: str, values: dict) -> str:
    """The task name of a tuning grid point: ``tune_point[<label>] <values as JSON>``."""
    return f"tune_point[{label}] {json.dumps(values)}"


def tuning_specs(spec) -> dict[str, object]:
    """The tuning seeds' tasks `train_members` may group: the warm start and every grid point.

    Each maps to `spec` as the task runs it (a grid point: its entry at the point's values),
    with the tuning seeds as its seeds and no tuning section.
    """
    from pflpipe.spec.tuning import point_spec

    def on_tuning_seeds(one):
        return one.model_copy(update={"tuning": None, "experiment": one.experiment.model_copy(
            update={"seeds": list(spec.tuning.seeds)})})

    specs = {"warm_start_fedavg": on_tuning_seeds(spec)}
    for tuned in spec.tuning.entries:
        for values in tuned.points():
            specs[point_name(tuned.entry, values)] = on_tuning_seeds(
                point_spec(spec, tuned.entry, values))
    return specs


def groups(spec, specs: dict[str, object] | None = None) -> tuple[list[str], dict[str, str]]:
    """The units trained as members, and the tasks that train per seed, with the reason.

    The tasks are `spec`'s (`task_names`), or the keys of `specs`, each judged by its own spec;
    a unit is one task, or variants of one algorithm joined with `JOINED`. What the spec alone
    decides; seeds with unequal client counts are found when partitioned.
    """
    candidates, per_seed = [], {}
    for name in _names(spec, specs):
        why = _per_seed_reason(_spec_of(spec, specs, name), name)
        if why is None:
            candidates.append(name)
        else:
            per_seed[name] = why
    units = _units(candidates, spec, specs)
    if spec.has_persfl if specs is None else "distill_grid_search" in specs:
        units.append(DISTILL)
    if len(spec.experiment.seeds) < 2:   # then only variants gain, and the warm start they need
        variants = [u for u in units if JOINED in u]
        if "warm_start_fedavg" in units and any(_needs_warm_start(u, spec, specs)
                                                for u in variants):
            variants.insert(0, "warm_start_fedavg")
        per_seed.update({u: "one seed" for u in units if u not in variants})
        units = variants
    if "warm_start_fedavg" not in units:
        for unit in [u for u in units if u == DISTILL or _needs_warm_start(u, spec, specs)]:
            units.remove(unit)
            per_seed[unit] = "it starts from the warm start, which trains per seed"
    return units, per_seed


def apart(spec, specs: dict[str, object] | None = None) -> dict[str, str]:
    """Units of one algorithm's entries that train apart, and why ("first: others" → reason).

    Each unit is set against the first unit of its algorithm; those apart for the same reason
    share one line.
    """
    units = [unit.split(JOINED) for unit in groups(spec, specs)[0]]
    lines: dict[tuple[str, str], list[str]] = {}
    for i, unit in enumerate(units):
        for first in units[:i]:
            why = _variant_reason(spec, specs, first[0], unit[0])
            if why != "different algorithms":
                lines.setdefault((JOINED.join(first), why), []).append(JOINED.join(unit))
                break
    return {f"{first}: {', '.join(others)}": why for (first, why), others in lines.items()}


def _names(spec, specs) -> list[str]:
    if specs is None:
        return task_names(spec)
    return [n for n in specs if n not in ("partition_data", *DISTILL.split(", "))]


def _spec_of(spec, specs, name: str):
    return spec if specs is None else specs[name]


def _stage(name: str) -> str:
    return name.split("[")[0]


def _label(name: str) -> str:
    """The entry of a personalize or tune_point task."""
    return name[name.index("[") + 1:name.index("]")]


def _needs_warm_start(unit: str, spec, specs) -> bool:
    return any(_stage(n) in ("personalize", "tune_point")
               and _spec_of(spec, specs, n).algorithm(_label(n)).warm_start != "none"
               for n in unit.split(JOINED))


def _units(names: list[str], spec, specs) -> list[str]:
    """`names` with the tasks whose entries are variants of one algorithm joined into one unit."""
    units: list[list[str]] = []
    for name in names:
        home = next((u for u in units if _variant_reason(spec, specs, u[0], name) is None), None)
        if home is None:
            units.append([name])
        else:
            home.append(name)
    return [JOINED.join(unit) for unit in units]


def _variant_reason(spec, specs, first: str, second: str) -> str | None:
    """Why tasks `first` and `second` cannot train in one unit; None if they can."""
    from pflpipe.algorithms import REGISTRY

    if _stage(first) != _stage(second) or _stage(first) not in ("personalize", "tune_point"):
        return "different algorithms"
    a, b = _spec_of(spec, specs, first), _spec_of(spec, specs, second)
    entry_a, entry_b = a.algorithm(_label(first)), b.algorithm(_label(second))
    if entry_a.name != entry_b.name:
        return "different algorithms"
    if a.model_dump(exclude={"personalization"}) != b.model_dump(exclude={"personalization"}):
        return "their tasks' specs differ outside the entries"
    per_member = REGISTRY[entry_a.name].member_params
    allowed = {*per_member, *type(entry_a).run_fields}
    fields = [f for f in type(entry_a).model_fields
              if f not in allowed and getattr(entry_a, f) != getattr(entry_b, f)]
    if fields:
        return (f"{', '.join(fields)} cannot differ between members of one batched run; "
                f"{entry_a.name} takes per member: {', '.join(per_member) or 'nothing'}")
    return None


def _per_seed_reason(spec, name: str) -> str | None:
    """Why the task `name` of `spec` trains per seed; None when it may train as members."""
    from pflpipe.algorithms import REGISTRY, Algorithm

    fed = spec.federation
    if fed.server_optimizer.name != "fedavg" or fed.server_optimizer.server_lr != 1.0:
        return "federation.server_optimizer"
    if name == "warm_start_fedavg":
        return "federation.early_stop: each seed stops on its own" if fed.early_stop else None
    label = None if name == "train_local" else _label(name)
    entry = spec.local_params if label is None else spec.algorithm(label)
    if _stage(name) == "personalize" and spec.tuning and spec.tuning.find(label):
        return "tuned: its setting is chosen by the tune stage"
    if REGISTRY[entry.name].modules is not Algorithm.modules:
        return f"{entry.name} builds networks of its own"
    return None


def whole(spec) -> bool:
    """Whether `train_members` trains every task of the spec's seeds, leaving them none.

    So it does when nothing trains per seed (`groups`) and there is no tuning: the seeds loop
    then only collects each seed's results from its output (`pflpipe.pipelines.graph`), and a
    unit that cannot train as members at run time (seeds with unequal client counts) trains
    seed by seed inside it.
    """
    return (spec.engine.seeds_as_members and not spec.tuning and spec.engine.shards == 1
            and not groups(spec)[1])


def seed_results(spec, members_dir: Path, seed: int) -> tuple[Path, Path, list[Path]]:
    """A seed's partition, warm-start checkpoints and results directories in `run`'s output.

    The results directories in the order the seeds loop collects them: the warm start, the
    local baseline, PersFL, then the personalize entries.
    """
    root = Path(members_dir) / layout.seed_folder(seed)
    names = task_names(spec)
    if spec.has_persfl:
        names.insert(2 if spec.runs_local else 1, "distill_grid_search")
    return (root / layout.PARTITIONS, root / layout.CHECKPOINTS,
            [root / _folder(name) for name in names])


def run(specs: dict[str, object], out_dir: Path, *, resume: str = "all",
        progress: bool = False, whole: bool = False) -> MembersResult:
    """Train the grouped tasks of `specs` as members; each seed's directories under `out_dir`.

    ``out_dir/seed-<s>/`` holds the seed's partition, warm-start checkpoints and a results
    directory per grouped task (named as the task), as its own tasks write them.

    `specs` maps each task to group (of `task_names`), and "partition_data", to the spec it
    runs with (the pipeline's scoped specs, so the checkpoints are those its per-seed tasks
    look for; each with the experiment's seeds). With `whole` (`whole` of the spec: the seeds
    loop trains nothing), a unit that cannot train as members trains seed by seed here.
    """
    from pflpipe.stages import partition_data

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
    for unit in grouped:
        try:
            _train(unit.split(JOINED), specs, seeds, parts, checkpoints, dirs, result.grouped,
                   progress=progress, resume=resume)
        except DataError as err:
            notice(f"{unit} trains per seed{' here' if whole else ''}: {err}")
            result.per_seed[unit] = str(err)
            if whole:
                _train_alone(unit.split(JOINED), specs, seeds, parts, checkpoints, dirs, resume)
            continue
        result.grouped.append(unit)
    return result


def _train_alone(names: list[str], specs: dict, seeds: list[int], parts: list[Path],
                 checkpoints: list[Path], dirs: dict, resume: str) -> None:
    """Train the unit `names` seed by seed, each as its own task would (`whole`)."""
    from pflpipe.stages import (
        distill_grid_search,
        personalize,
        select_teachers,
        train_local,
        warm_start_fedavg,
    )

    for seed, part, checkpoint in zip(seeds, parts, checkpoints, strict=True):
        for name in names:
            spec, out = specs.get(name), dirs[seed] / _folder(name)
            if name == "warm_start_fedavg":
                warm_start_fedavg.run(spec, seed, part, checkpoint, out, resume=resume)
            elif name == "train_local":
                train_local.run(spec, seed, part, out, resume=resume)
            elif name == DISTILL:
                teachers = dirs[seed] / "select_teachers"
                select_teachers.run(specs["select_teachers"], checkpoint, teachers)
                distill_grid_search.run(specs["distill_grid_search"], seed, part, checkpoint,
                                        teachers, dirs[seed] / "distill_grid_search")
            else:
                personalize.run(spec, seed, _label(name), part, checkpoint, out, resume=resume)


def _train(names: list[str], specs: dict, seeds: list[int], parts: list[Path],
           checkpoints: list[Path], dirs: dict, done: list[str], **how) -> None:
    """Train the unit `names` (one task, or variants of one entry) as members."""
    from pflpipe.stages import personalize, train_local, tune_point, warm_start_fedavg

    spec = specs.get(names[0])
    outs = [[dirs[s] / _folder(name) for s in seeds] for name in names]
    if names[0] == "warm_start_fedavg":
        warm_start_fedavg.run_members(spec, seeds, parts, checkpoints, outs[0], **how)
    elif names[0] == "train_local":
        train_local.run_members(spec, seeds, parts, outs[0], **how)
    elif names[0] == DISTILL:
        _distil(specs, seeds, parts, checkpoints, dirs, done, how["resume"])
    elif "warm_start_fedavg" not in done and any(
            specs[n].algorithm(_label(n)).warm_start != "none" for n in names):
        raise DataError("it starts from the warm start, which trained per seed")
    elif _stage(names[0]) == "tune_point":
        tune_point.run_members([(specs[n], _label(n), json.loads(n.split("] ", 1)[1]))
                                for n in names], seeds, parts, checkpoints, outs, **how)
    else:
        personalize.run_variants([(specs[n], _label(n)) for n in names], seeds, parts,
                                 checkpoints, outs, **how)


def _distil(specs: dict, seeds: list[int], parts: list[Path], checkpoints: list[Path],
            dirs: dict, done: list[str], resume: str) -> None:
    """Every seed's teachers (NumPy, seed by seed), then their grids as members of one job.

    Each seed's grid is kept in its store, where its distill_grid_search task finds it.
    """
    from pflpipe.stages import distill_grid_search, select_teachers

    if "warm_start_fedavg" not in done:
        raise DataError("it starts from the warm start, which trained per seed")
    teachers = [dirs[s] / "select_teachers" for s in seeds]
    for checkpoint, out in zip(checkpoints, teachers, strict=True):
        select_teachers.run(specs["select_teachers"], checkpoint, out)
    distill_grid_search.run_members(specs["distill_grid_search"], seeds, parts, checkpoints,
                                    teachers, [dirs[s] / "distill_grid_search" for s in seeds],
                                    resume=resume)


def _folder(name: str) -> str:
    """A task's results folder: its name, a grid point's with a digest of its values."""
    if " " not in name:
        return name
    return f"{name.split(' ')[0]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
