"""``pflpipe validate SPEC...``: check specs and print what each would run."""

from pathlib import Path

from pflpipe.errors import SpecError
from pflpipe.spec import read_spec


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "validate", help="Check specs; report every problem with its YAML line.",
        description="Validate one or more specs. Exit 2 if any is invalid.")
    parser.add_argument("specs", nargs="+", type=Path, metavar="SPEC")
    parser.add_argument("-q", "--quiet", action="store_true", help="Print problems only.")
    parser.set_defaults(handler=run)


def run(args) -> int:
    """Validate every spec; raise one SpecError holding all problems."""
    problems: list[str] = []
    for path in args.specs:
        try:
            spec = read_spec(path)
        except SpecError as err:
            problems.extend(err.problems)
            continue
        if not args.quiet:
            print(f"{path}: valid")
            print(plan(spec))
    if problems:
        raise SpecError(problems)
    return 0


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


def plan(spec) -> str:
    """Describe, in a few lines, the stages the spec runs."""
    part, fed = spec.partition, spec.federation
    algorithms = [entry.display_name for entry in spec.personalization if entry.name != "persfl"]
    lines = [
        f"  experiment {spec.experiment.name!r}: seeds {spec.experiment.seeds}, results in "
        f"{spec.experiment.results_dir}/",
        f"  partition_data      {spec.dataset.name}, {_partition(part)}",
        f"  warm_start_fedavg   {spec.model.architecture}, {fed.rounds} rounds × "
        f"{fed.local_epochs} local epoch(s), {fed.optimizer} lr {fed.lr:g}, batch {fed.batch_size}",
    ]
    if spec.runs_local:
        lines.append("  train_local         local-only baseline, "
                     f"{spec.local_params.epochs} epochs")
    if algorithms:
        lines.append(f"  personalize         {', '.join(algorithms)}")
    if spec.has_persfl:
        dist = spec.distillation
        lines += [
            f"  select_teachers     per-client round by {spec.teachers.criterion}"
            f" (teacher: {dist.teacher})",
            f"  distill_grid_search {len(dist.lambdas)} λ × {len(dist.temperatures)} T, "
            f"{dist.epochs} epochs, objective {dist.objective}, chosen on {dist.selection_split}",
        ]
    lines.append(f"  evaluate_fairness   baselines {spec.evaluation.baselines.local!r} and "
                 f"{spec.evaluation.baselines.global_!r}, metrics chosen on "
                 f"{spec.evaluation.selection}")
    sharded = [*(["train_local"] if spec.runs_local else []),
               *(["distill_grid_search"] if spec.has_persfl else []),
               *(f"personalize[{entry.display_name}]" for entry in spec.personalization
                 if entry.stage == "personalize" and entry.clients_train_alone)]
    if spec.engine.shards > 1 and sharded:
        lines.append(f"  engine              {', '.join(sharded)} as {spec.engine.shards} tasks "
                     "each, one per client shard, then merged")
    if spec.engine.workers > 1:
        lines.append(f"  engine              warm_start_fedavg, train_local and personalize as "
                     f"{spec.engine.workers} workers, each a shard of the clients")
    return "\n".join(lines)
