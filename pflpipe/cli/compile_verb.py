"""``pflpipe compile SPEC -o pipeline.yaml``: the spec's pipeline as KFP IR YAML."""

from pathlib import Path


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "compile", help="Compile the spec's pipeline to KFP IR YAML for a cluster.",
        description="Write the KFP v2 pipeline of the spec (IR YAML, with the Kubernetes "
        "settings of resources: images, CPU/memory, GPUs, node selectors, tolerations, the S3 "
        "secret). Its parameters tracking_uri, experiment and parent_run_id select the MLflow "
        "server when a run starts.")
    parser.add_argument("spec", type=Path, metavar="SPEC")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="Output file (default: <experiment name>.yaml).")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="Override a spec setting, validated like the file (repeatable).")
    parser.add_argument("--force", action="store_true",
                        help="Replace FILE even when `pflpipe compile` did not write it or it "
                        "was edited since (your spec, another file).")
    parser.set_defaults(handler=run)


def run(args) -> int:
    """Compile and say what was written."""
    from pflpipe.cli import UsageError
    from pflpipe.layout import compiled_pipeline
    from pflpipe.overwrite import claim_file
    from pflpipe.pipelines.compiler import compile_pipeline
    from pflpipe.pipelines.graph import personalize_labels
    from pflpipe.spec import read_spec
    from pflpipe.spec.overrides import parse_assignments
    from pflpipe.tracking.runs import without_credentials

    # Credentials never go into the IR: the pods get MLFLOW_TRACKING_USERNAME/PASSWORD.
    spec = without_credentials(read_spec(args.spec, parse_assignments(args.set)))
    path = args.output or Path(compiled_pipeline(spec.experiment.name))
    if path.suffix not in (".yaml", ".yml"):
        example = (path / compiled_pipeline(spec.experiment.name) if path.is_dir()
                   else path.with_name(path.name + ".yaml"))
        raise UsageError(f"-o {path}: KFP writes a pipeline to a .yaml (or .yml) file; name one, "
                         f"e.g. -o {example}")
    claim = claim_file(path, "pflpipe compile", force=args.force)
    if created := claim.make_folder():
        print(created)
    path = compile_pipeline(spec, path)
    claim.record()
    labels = personalize_labels(spec)
    print(f"{path}: pipeline {spec.experiment.name!r}, seeds {spec.experiment.seeds}, "
          f"personalize {labels or 'none'}, image {spec.resources.image}")
    if spec.sweep:
        from pflpipe.spec.sweep import points

        print(f"sweep: {len(points(spec))} points in one pipeline, an output (report) per point: "
              + ", ".join(p.label for p in points(spec)))
    print("parameters: tracking_uri, experiment, parent_run_id (empty: the pipeline opens its "
          "own parent run when a tracking URI is known)")
    return 0

