"""Component `collect_results`: gather one seed's results directories into one.

The personalize loop is nested in the seeds loop, and KFP fans in one loop level at a time (the
local runner cannot pass a `dsl.Collected` of a nested loop), so each seed's results meet here and
`evaluate_fairness` collects one directory per seed. Its numbers go to a KFP Metrics artifact.
The training stages have tracked their own results, except the cached warm start, which takes no
run id: this task logs it into the run's `warm_start_fedavg` child run.
"""

from kfp import dsl
from kfp.dsl import Input, Markdown, Metrics, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def collect_results(spec_json: str, seed: int, tracking_uri: str, experiment: str,
                    parent_run_id: str, fedavg: Input[Model], results: Output[Model],
                    metrics: Output[Metrics], summary: Output[Markdown], local: Input[Model] = None,
                    persfl: Input[Model] = None, personalized: Input[list[Model]] = None):
    """Copy each results directory under `results/<model>/`; concatenate their tables."""
    from pathlib import Path

    from pflpipe.spec import Spec
    from pflpipe.stages import collect_results as stage
    from pflpipe.stages import warm_start_fedavg
    from pflpipe.tracking import child_run

    spec = Spec.model_validate_json(spec_json)
    with child_run(spec.tracking, tracking_uri, experiment, parent_run_id, "warm_start_fedavg",
                   {"seed": str(seed), "algorithm": "fedavg"}) as tracker:
        warm_start_fedavg.track(spec, seed, Path(fedavg.path), tracker)
    inputs = [a for a in (fedavg, local, persfl, *(personalized or [])) if a is not None]
    result = stage.run(spec, seed, [Path(a.path) for a in inputs], Path(results.path))
    metrics.metadata.update(result.metrics())
    Path(summary.path).write_text(result.to_markdown())
