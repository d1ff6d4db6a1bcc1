"""Component `collect_results`: gather one seed's results directories into one; track them.

The personalize loop is nested in the seeds loop, and KFP fans in one loop level at a time (the
local runner cannot pass a `dsl.Collected` of a nested loop), so each seed's results meet here and
`evaluate_fairness` collects one directory per seed. The training stages are cached and take no
MLflow run id, so this task, which runs every time, logs them into the parent run.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def collect_results(spec_json: str, seed: int, tracking_uri: str, experiment: str,
                    parent_run_id: str, partition: Input[Dataset], checkpoints: Input[Model],
                    fedavg: Input[Model], results: Output[Model], metrics: Output[Metrics],
                    summary: Output[Markdown], local: Input[Model] = None,
                    persfl: Input[Model] = None, personalized: Input[list[Model]] = None,
                    tuned: Input[list[Model]] = None):
    """Copy each results directory under `results/<model>/`; concatenate and track them."""
    from pflpipe import events

    with events.stage("collect_results", seed=seed):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import collect_results as stage
        from pflpipe.tracking import parent_tracker

        spec = Spec.model_validate_json(spec_json)
        tracker = parent_tracker(spec.tracking, tracking_uri, parent_run_id, experiment)
        inputs = [a for a in (fedavg, local, persfl, *(personalized or []), *(tuned or []))
                  if a is not None]
        result = stage.run(spec, seed, [Path(a.path) for a in inputs], Path(results.path),
                           partition_dir=Path(partition.path),
                           checkpoints_dir=Path(checkpoints.path), tracker=tracker)
        metrics.metadata.update(result.metrics())
        Path(summary.path).write_text(result.to_markdown())
