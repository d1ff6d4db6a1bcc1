"""Component `evaluate_fairness`: the performance and fairness report over every seed."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def evaluate_fairness(spec_json: str, tracking_uri: str, experiment: str, parent_run_id: str,
                      results: Input[list[Model]], report: Output[Artifact],
                      html: Output[HTML], summary: Output[Markdown]):
    """Evaluate every seed's results; write the report and log its metrics on the parent run."""
    import shutil
    from pathlib import Path

    from pflpipe.spec import Spec
    from pflpipe.stages import evaluate_fairness as stage
    from pflpipe.tracking import parent_tracker

    spec = Spec.model_validate_json(spec_json)
    tracker = parent_tracker(spec.tracking, tracking_uri, parent_run_id, experiment)
    result = stage.run(spec, [Path(r.path) for r in results], Path(report.path), tracker=tracker)
    shutil.copyfile(Path(report.path) / "report.html", html.path)
    Path(summary.path).write_text(result.to_markdown())
