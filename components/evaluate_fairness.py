"""Component `evaluate_fairness`: the performance and fairness report over every seed.

It logs the report on the MLflow parent run; given no parent run id (a pipeline started in the
KFP UI) but a tracking URI, it opens the parent run itself and logs every seed into it.
"""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def evaluate_fairness(spec_json: str, tracking_uri: str, experiment: str, parent_run_id: str,
                      kfp_run_id: str, results: Input[list[Model]], report: Output[Artifact],
                      html: Output[HTML], summary: Output[Markdown], sweep_point: str = ""):
    """Evaluate every seed's results; write the report, log it (a sweep point's: its child run)."""
    import json

    from pflpipe import events

    with events.stage("evaluate_fairness",
                      sweep_point=json.loads(sweep_point or "{}").get("label")):
        import shutil
        from pathlib import Path

        from pflpipe.layout import REPORT_HTML
        from pflpipe.spec import Spec
        from pflpipe.stages import evaluate_fairness as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run_in_pipeline(
            spec, [Path(r.path) for r in results], Path(report.path), tracking_uri=tracking_uri,
            experiment=experiment, parent_run_id=parent_run_id, kfp_run_id=kfp_run_id,
            sweep_point=sweep_point)
        shutil.copyfile(Path(report.path) / REPORT_HTML, html.path)
        report.metadata["seed_dirs"] = {str(s): str(d) for s, d in result.seed_dirs.items()}
        Path(summary.path).write_text(result.to_markdown())
