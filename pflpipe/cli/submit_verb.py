"""``pflpipe submit SPEC --host URL``: upload the spec's pipeline to Kubeflow and start a run."""

from pathlib import Path


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "submit", help="Upload the pipeline to a KFP API server and start a run.",
        description="Compile the spec's pipeline, upload it (a new version when a pipeline of "
        "that name exists) and start a run with kfp.Client. The MLflow parent run is opened "
        "here first, so tracking.uri (or $MLFLOW_TRACKING_URI) must be a server the pods can "
        "reach; the parent stays RUNNING while the pipeline runs on the cluster.")
    parser.add_argument("spec", type=Path, metavar="SPEC")
    parser.add_argument("--host", required=True, metavar="URL", type=host_url,
                        help="KFP API endpoint, e.g. http://localhost:8080 after kubectl "
                        "port-forward -n kubeflow svc/ml-pipeline-ui 8080:80.")
    parser.add_argument("--experiment", metavar="E",
                        help="KFP experiment (default: the spec's experiment name).")
    parser.add_argument("--namespace", metavar="N", help="Kubernetes namespace (multi-user).")
    parser.add_argument("--run-name", metavar="R", help="Run name (default: <name>-<time>).")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="Override a spec setting, validated like the file (repeatable).")
    parser.set_defaults(handler=run)


def host_url(text: str) -> str:
    """Parse --host: an http(s) URL with a host name (kfp.Client would read "x" as https://x)."""
    import argparse
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    try:
        parts.port   # noqa: B018 - raises on a port that is not a number
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) URL; give the KFP API endpoint with its scheme, e.g. "
            "http://localhost:8080 or https://kfp.example.com")
    return text


def run(args) -> int:
    """Check the tracking server, open the parent run, submit, print the run's URL."""
    from pflpipe.errors import SpecError
    from pflpipe.pipelines.kfp_submit import check_server, submit
    from pflpipe.sharing import CLUSTER, unshared
    from pflpipe.spec import read_spec
    from pflpipe.spec.overrides import parse_assignments
    from pflpipe.tracking import open_parent_run, resolve_tracking_uri
    from pflpipe.tracking.runs import without_credentials

    # credentials never uploaded inside the pipeline
    spec = without_credentials(read_spec(args.spec, parse_assignments(args.set)))
    uri = resolve_tracking_uri(spec.tracking) if spec.tracking.enabled else None
    # what pods cannot share (a local checkpoint store or sqlite file, a relative dataset root)
    if problems := unshared(spec, CLUSTER, uri):
        raise SpecError([f"{args.spec}: {problem}" for problem in problems])
    check_server(args.host)  # before the MLflow parent run: a dead --host leaves no FAILED run
    parent = open_parent_run(spec, spec_yaml=args.spec.read_text(encoding="utf-8"),
                             tags={"kfp_host": args.host})
    try:
        done = submit(spec, host=args.host, experiment=args.experiment or spec.experiment.name,
                      arguments=parent.pipeline_parameters(), namespace=args.namespace,
                      run_name=args.run_name)
    except BaseException:
        parent.finish("FAILED")
        raise
    if parent.run_id:
        parent.tracker().set_tags({"kfp_run_id": done.run_id, "kfp_run_url": done.url})
    uploaded = "new pipeline" if done.is_new_pipeline else "new version of pipeline"
    print(f"submitted {spec.experiment.name!r} as run {done.run_id} ({uploaded} "
          f"{done.pipeline_id}, version {done.version_id})")
    print(f"run: {done.url}")
    if parent.run_id:
        print(f"MLflow parent run {parent.run_id} at {parent.tracking_uri}")
    return 0
