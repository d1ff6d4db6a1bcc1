"""``pflpipe validate SPEC...``: check specs and print what each would run."""

from pathlib import Path

from pflpipe.errors import SpecError
from pflpipe.spec import read_spec
from pflpipe.spec.tuning import unequal_tuning


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "validate", help="Check specs; report every problem with its YAML line.",
        description="Validate one or more specs. Exit 2 if any is invalid.")
    parser.add_argument("specs", nargs="+", type=Path, metavar="SPEC")
    parser.add_argument("-q", "--quiet", action="store_true", help="Print problems only.")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="Override a spec setting as run, compile and split do, e.g. --set "
                        "federation.lr=1e-3 (repeatable; values are YAML).")
    parser.set_defaults(handler=run)


def run(args) -> int:
    """Validate every spec (with the overrides); raise one SpecError holding all problems.

    Past the schema, the model is checked as far as the spec alone determines it: a custom path
    must name an nn.Module subclass, and the clients' copies must fit in memory.
    """
    from pflpipe.spec.overrides import parse_assignments

    overrides = parse_assignments(args.set)
    problems: list[str] = []
    for path in args.specs:
        try:
            spec = read_spec(path, overrides)
            checked_model(spec, path)
            found = data_preview(spec, path)
        except SpecError as err:
            problems.extend(err.problems)
            continue
        if not args.quiet:
            print(f"{path}: valid")
            print(plan(spec, found))
            if spec.sweep:
                print(sweep_plan(spec))
    if problems:
        raise SpecError(problems)
    return 0


def sweep_plan(spec) -> str:
    """The sweep's points, one line each: its label and what it runs (`pflpipe.spec.sweep`)."""
    from pflpipe.spec.sweep import points

    found = points(spec)
    seeds = len(spec.experiment.seeds)
    lines = [f"  sweep: {len(found)} point(s) × {seeds} seed(s) = {len(found) * seeds} runs of "
             "the pipeline above, in one pipeline (stages a point does not change are shared)"]
    lines += [f"    {point.label}" for point in found]
    return "\n".join(lines)


def checked_model(spec, path) -> None:
    """Raise SpecError (problems prefixed with `path`) when the spec's model fails its checks."""
    from pflpipe.models.check import check_model

    try:
        check_model(spec)
    except SpecError as err:
        raise SpecError([f"{path}: {problem}" for problem in err.problems]) from None


def data_preview(spec, path):
    """What `run` will find in the data where the spec alone cannot say (`stages.preview`).

    Raises:
        SpecError: `run` would refuse the data (a predefined file's client count, validation
            rows for only some clients, a missing file), prefixed with `path`.

    """
    from pflpipe.cli.data_preview import needs_data, preview
    from pflpipe.errors import DataError

    if not needs_data(spec):
        return None
    if getattr(spec.dataset, "source", None):
        return None   # fetched from S3 when the pipeline runs
    try:
        return preview(spec)
    except DataError as err:
        raise SpecError([f"{path}: the data: {err}"]) from None


def _normalisation(spec, found) -> str:
    """How samples become inputs, with the numbers: read from the data where they come from it."""
    from pflpipe.cli.data_preview import known_normalisation, needs_data

    if found:
        return found.normalisation
    if not needs_data(spec):
        return known_normalisation(spec.dataset)
    return (f"{getattr(spec.dataset, 'normalization', 'none')}, its numbers from the data once "
            "fetched from dataset.source")


def _partition(part) -> str:
    """How the clients and their splits are made: a strategy's fractions, or given splits."""
    if part.strategy != "predefined":
        return (f"{part.strategy} over {part.n_clients} clients (train/val/test "
                f"{part.fractions.train:g}/{part.fractions.val:g}/{part.fractions.test:g})")
    clients = f"{part.n_clients} clients" if part.n_clients else "every client"
    held = (f", {part.val_from_train:g} of train held out as val where none is given"
            if part.val_from_train else "")
    return (f"predefined splits of {clients} from {part.path or 'the dataset'}"
            f" (used as given{held})")


def plan(spec, found=None) -> str:
    """Describe, in a few lines, the stages the spec runs.

    `found`: what the data holds (`stages.preview.Preview`), where the spec alone cannot say.
    """
    part, fed = spec.partition, spec.federation
    algorithms = [entry.display_name for entry in spec.personalization if entry.name != "persfl"]
    lines = [
        f"  experiment {spec.experiment.name!r}: seeds {spec.experiment.seeds}, results in "
        f"{spec.experiment.results_dir}/",
        f"  partition_data      {spec.dataset.name}, {_partition(part)}",
        *([f"    first seed: {found.clients}"] if found else []),
        *(f"    warning: {text}" for text in (found.warnings if found else ())),
        f"    normalisation: {_normalisation(spec, found)}",
        f"  warm_start_fedavg   {spec.model.architecture}, {fed.rounds} rounds × "
        f"{fed.local_epochs} local epoch(s), {fed.optimizer} lr {fed.lr:g}, batch {fed.batch_size}",
    ]
    if spec.runs_local:
        lines.append("  train_local         local-only baseline, "
                     f"{spec.local_params.epochs} epochs")
    if algorithms:
        lines.append(f"  personalize         {', '.join(algorithms)}")
    lines += tuning_plan(spec)
    if spec.has_persfl:
        dist = spec.distillation
        lines += [
            f"  select_teachers     per-client round by {spec.teachers.criterion}"
            f" (teacher: {dist.teacher})",
            f"  distill_grid_search {len(dist.lambdas)} λ × {len(dist.temperatures)} T, "
            f"{dist.epochs} epochs, objective {dist.objective}, chosen on {dist.selection_split}",
        ]
    chosen = spec.evaluation.selection
    if found and not found.has_validation and chosen == "best_val":
        chosen += " (no validation rows: the last round)"
    if spec.runs_local:
        lines.append(f"  evaluate_fairness   baselines {spec.evaluation.baselines.local!r} and "
                     f"{spec.evaluation.baselines.global_!r}, metrics chosen on {chosen}")
    else:   # run skips train_local: no personalized model to compare with the local baseline
        lines.append(f"  evaluate_fairness   {spec.evaluation.baselines.global_!r} alone (no "
                     f"personalization: no local baseline, nothing to compare), metrics chosen "
                     f"on {chosen}")
    sharded = [*(["train_local"] if spec.runs_local else []),
               *(["distill_grid_search"] if spec.has_persfl else []),
               *(f"personalize[{entry.display_name}]" for entry in spec.personalization
                 if entry.stage == "personalize" and entry.clients_train_alone)]
    if spec.engine.shards > 1 and sharded:
        lines.append(f"  engine              {', '.join(sharded)} as {spec.engine.shards} tasks "
                     "each, one per client shard, then merged")
    if spec.engine.seeds_as_members:
        lines += members_plan(spec)
    if spec.engine.workers > 1:
        lines.append(f"  engine              warm_start_fedavg, train_local and personalize as "
                     f"{spec.engine.workers} workers, each a shard of the clients")
    from pflpipe.disk import estimate

    if (need := estimate(spec)) is not None:
        lines.append(f"  disk                {need.describe()} in "
                     f"{spec.experiment.results_dir}/ (`pflpipe run` checks its free space)")
    return "\n".join(lines)


def members_plan(spec) -> list[str]:
    """How `engine.seeds_as_members` groups the tasks: one task per seed loop, what stays apart."""
    from pflpipe.stages.train_members import tuning_specs

    lines = _members_lines(spec, None, "seeds")
    if spec.tuning is not None:
        specs = tuning_specs(spec)
        lines += _members_lines(specs["warm_start_fedavg"], specs, "tuning seeds")
    return lines


def _members_lines(spec, specs, which: str) -> list[str]:
    """One seeds loop's train_members line: its units, then what trains per seed or apart."""
    from pflpipe.stages.train_members import JOINED, apart, groups, whole

    grouped, per_seed = groups(spec, specs)
    seeds = spec.experiment.seeds
    counted = f"the {len(seeds)} {which}" if len(seeds) > 1 else f"the one {which[:-1]}"
    after = ("the loop then only collects each seed's results from it" if specs is None
             and whole(spec) else "their per-seed tasks then reuse its checkpoints")
    lines = [f"  train_members       {', '.join(grouped)}: {counted} as members "
             f"of one federation each, in one task before the {which} loop ({after})"
             if grouped else
             f"  train_members       nothing to group over the {which}: every task trains per "
             "seed"]
    if any(JOINED in unit for unit in grouped):
        lines.append(f"    'a{JOINED}b': hyper-parameter variants of one algorithm (entries or "
                     f"grid points), every variant × seed a member of one federation")
    lines += [f"    per seed: {task} ({why})" for task, why in per_seed.items()]
    lines += [f"    apart from {units} ({why})" for units, why in apart(spec, specs).items()]
    return lines


def tuning_plan(spec) -> list[str]:
    """The tuning stages' lines: seeds, each entry's grid and budget, the untuned entries."""
    tuning = spec.tuning
    if tuning is None:
        return []
    lines = [f"  tune                tuning seeds {tuning.seeds} (never reported), each entry's "
             f"setting chosen on their validation splits ({spec.evaluation.selection})"]
    for tuned in tuning.entries:
        budget = tuning.budget_of(tuned)
        rounds = f", {budget.rounds} rounds each" if budget.rounds else ""
        grid = ", ".join(f"{key} {values}" for key, values in tuned.grid.items())
        lines.append(f"    {tuned.entry}: {len(tuned.points())} grid point(s) of at most "
                     f"{budget.max_points}{rounds}: {grid}")
    untuned = [e.display_name for e in spec.personalization
               if e.stage == "personalize" and not tuning.find(e.display_name)]
    if untuned:
        lines.append(f"    not tuned (the spec's settings): {', '.join(untuned)}")
    warning = unequal_tuning(spec)
    return lines + ([f"    warning: {warning}"] if warning else [])
