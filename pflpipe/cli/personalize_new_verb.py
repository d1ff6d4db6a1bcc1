"""``pflpipe personalize-new SPEC --client-data FILE``: personalize a late-joining client.

The client joins after training; it is personalized from the stored per-round global models and
its own data.
"""

from pathlib import Path

from pflpipe.cli import UsageError, seed_argument
from pflpipe.layout import LATEST, SOURCES_JSON


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "personalize-new", help="Personalize a client that joins after training (thesis §7.1).",
        description="Pick a new client's teacher among the warm start's per-round global models "
        "using only its validation split, then run the spec's λ/T distillation grid.")
    parser.add_argument("spec", type=Path, metavar="SPEC")
    parser.add_argument("--client-data", type=Path, required=True, metavar="FILE",
                        help=".npz (or .pt) with arrays x and y in the dataset's raw format.")
    parser.add_argument("--partition", type=Path, metavar="DIR",
                        help="The experiment's partition directory (default: the one the "
                        f"latest `pflpipe run` used, from <results>/{LATEST}/seed-<seed>/"
                        f"{SOURCES_JSON}).")
    parser.add_argument("--checkpoints", type=Path, metavar="DIR",
                        help="The warm start's checkpoint directory (default: as --partition).")
    parser.add_argument("--seed", type=seed_argument, default=None,
                        help="Seed (the spec's first).")
    parser.add_argument("-o", "--output", type=Path, metavar="DIR",
                        help="Output directory (default: <results>/newcomer/<FILE's stem>).")
    parser.add_argument("--force", action="store_true",
                        help="Write into DIR even when it holds files `pflpipe personalize-new` "
                        "did not write there (a run's results, your files, your edits): the "
                        "files it writes replace theirs by name; nothing else is touched.")
    parser.set_defaults(handler=run)


def run(args) -> int:
    """Run the newcomer's teacher selection and grid; print the outcome."""
    from pflpipe.spec import read_spec

    spec = read_spec(args.spec)
    if args.client_data.is_dir():
        raise UsageError(f"--client-data: {args.client_data} is a directory; give the newcomer's "
                         "data file: an .npz (np.savez(path, x=..., y=...)) or a .pt dict of "
                         "tensors x, y")
    seed = spec.experiment.seeds[0] if args.seed is None else args.seed
    partition, checkpoints = args.partition, args.checkpoints
    if partition is None or checkpoints is None:
        found = _sources(Path(spec.experiment.results_dir), seed, spec.warm_start_hash(),
                         args.spec)
        partition, checkpoints = partition or found[0], checkpoints or found[1]
    for what, path in (("--client-data", args.client_data), ("--partition", partition),
                       ("--checkpoints", checkpoints)):
        if not path.exists():
            raise UsageError(f"{what}: {path} does not exist" + (
                "; run `pflpipe run SPEC` again or pass the directory"
                if what != "--client-data" else ""))
    from pflpipe import layout
    from pflpipe.overwrite import claim_dir
    from pflpipe.stages import personalize_new

    out = args.output or Path(spec.experiment.results_dir) / "newcomer" / args.client_data.stem
    written = (layout.TEACHER_JSON, layout.GRID_CSV, layout.MODEL_PT, layout.SUMMARY_MD)
    claim = claim_dir(out, "pflpipe personalize-new", force=args.force)
    result = personalize_new.run(spec, args.client_data, partition, checkpoints, out, seed)
    claim.record(written)
    print(result.to_text())
    print(f"wrote {out}/ ({', '.join(written)})")
    return 0


def _sources(results_dir: Path, seed: int, made_from: str, spec_path) -> tuple[Path, Path]:
    """The partition and checkpoints the latest `pflpipe run` used for `seed`.

    Refused when that run was made from another spec's data, partition, model or federation
    (`Spec.warm_start_hash` differs): its checkpoints were trained as that spec said (its
    rounds, learning rate, clients), not as this one says.
    """
    import json

    from pflpipe.layout import seed_folder
    from pflpipe.spec.spec import WARM_START_SECTIONS

    file = results_dir / LATEST / seed_folder(seed) / SOURCES_JSON
    if not file.is_file():
        raise UsageError(f"no finished `pflpipe run` of this spec with seed {seed} in "
                         f"{results_dir} ({file} is missing); run `pflpipe run SPEC` first, or "
                         "pass --partition and --checkpoints")
    sources = json.loads(file.read_text())
    made_by = sources.get("warm_start_hash")
    if made_by is not None and made_by != made_from:
        raise UsageError(f"the latest run in {results_dir} was made from another spec: its "
                         f"{', '.join(WARM_START_SECTIONS)} sections differ from {spec_path}'s "
                         f"(warm-start hash {made_by}, this spec's {made_from}), so its partition "
                         "and checkpoints were trained as that spec said, not as this one says. "
                         "Run `pflpipe run SPEC` again for this spec, or pass --partition and "
                         "--checkpoints to use that run's models knowingly")
    return Path(sources["partition"]), Path(sources["checkpoints"])
