"""Compile a spec's pipeline to KFP IR YAML (for `kfp.Client`, the KFP UI or `kfp run create`)."""

from pathlib import Path

from pflpipe.pipelines.graph import build_pipeline


def compile_pipeline(spec, path: Path, arguments: dict[str, str] | None = None) -> Path:
    """Write the pipeline of `spec` to `path`; `arguments` override the parameters' defaults.

    The tracking settings are pipeline parameters, so one file can run against any MLflow
    server: pass `tracking_uri`, `experiment` and `parent_run_id` when starting a run.
    """
    from kfp import compiler

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(build_pipeline(spec), str(path), pipeline_parameters=arguments)
    return path
