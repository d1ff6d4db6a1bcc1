"""Component `collect_results`: gather one seed's results directories into one.

The personalize loop is nested in the seeds loop, and KFP fans in one loop level at a time (the
local runner cannot pass a `dsl.Collected` of a nested loop), so each seed's results meet here and
`evaluate_fairness` collects one directory per seed, and logs them into MLflow: this task imports
neither mlflow nor torch (docs/performance.md, start-up).
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def collect_results(spec_json: str, seed: int, partition: Input[Dataset],
                    checkpoints: Input[Model], fedavg: Input[Model], results: Output[Model],
                    metrics: Output[Metrics], summary: Output[Markdown], local: Input[Model] = None,
                    persfl: Input[Model] = None, personalized: Input[list[Model]] = None,
                    tuned: Input[list[Model]] = None):
    """Copy each results directory under `results/<model>/`; concatenate their tables."""
    from pflpipe import events

    with events.stage("collect_results", named=summary, seed=seed):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import collect_results as stage

        spec = Spec.model_validate_json(spec_json)
        inputs = [a for a in (fedavg, local, persfl, *(personalized or []), *(tuned or []))
                  if a is not None]
        result = stage.run(spec, seed, [Path(a.path) for a in inputs], Path(results.path),
                           partition_dir=Path(partition.path),
                           checkpoints_dir=Path(checkpoints.path))
        metrics.metadata.update(result.metrics())
        Path(summary.path).write_text(result.to_markdown())
