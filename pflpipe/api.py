"""pflpipe from Python: ``pflpipe.run``, ``pflpipe.load_spec``, ``pflpipe.compile``.

    import pflpipe

    result = pflpipe.run("specs/persfl-digits.yaml", federation={"rounds": 50})
    result.results            # every seed's per-client table (pandas)
    result.best               # ("persfl",) when resolved over seeds; ("fedper", "persfl") when tied
    result.report_html, result.mlflow_run_id

`best` and `fairest` are tuples: the models tied at the top of the primary split, one name where
the Holm-corrected paired test over two or more seeds resolves the winner; with one seed every
contender (training noise was not measured); empty with one contender (nothing to compare) or none
(`pflpipe.metrics.pairwise`).

Overrides are keyword arguments: a section as a mapping merged into the spec's
(``federation={"rounds": 50}``) or a dotted path (``**{"federation.rounds": 50}``), validated
like the file (`pflpipe.spec.overrides`). Nothing heavy is imported until a function runs.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from os import PathLike
from pathlib import Path
from typing import Any

from pflpipe import layout
from pflpipe.spec import Spec, read_spec
from pflpipe.spec.loader import parse_spec


def verdict_top(report: Mapping[str, Any], question: str) -> tuple[str, ...]:
    """The models tied at the top for `question` ("best", "fairest") in a report.json's content.

    >>> verdict_top({"verdicts": {"best": {"top": ["a", "b"]}}}, "best")
    ('a', 'b')
    """
    return tuple(report["verdicts"].get(question, {}).get("top", ()))


def load_spec(spec: "Spec | Mapping[str, Any] | str | Path", **overrides: Any) -> Spec:
    """Return the validated spec of a file, a mapping or a `Spec`, with `overrides` applied.

    A mapping holds what the YAML file would (``{"experiment": {"name": ...}, ...}``).

    Raises:
        SpecError: every problem, each naming its field and line (or its override).

    """
    if isinstance(spec, Spec) and not overrides:
        return spec
    if isinstance(spec, Spec | Mapping):
        import yaml

        data = spec.model_dump(mode="json", by_alias=True) if isinstance(spec, Spec) else spec
        try:
            text = yaml.safe_dump(dict(data), sort_keys=False)
        except yaml.YAMLError as err:
            from pflpipe.errors import SpecError

            raise SpecError(f"<dict>: the spec holds a value YAML cannot write ({err})") from None
        if isinstance(spec, Spec):
            return parse_spec(text, "<spec>", overrides, source="override")
        from pflpipe.errors import SpecError

        try:
            return parse_spec(text, "<dict>", overrides, source="override")
        except SpecError as err:  # lines of YAML the caller never wrote: name the field only
            raise SpecError([re.sub(r"^<dict>:\d+", "<dict>", p) for p in err.problems]) from None
    if not isinstance(spec, str | PathLike):
        raise TypeError(f"load_spec takes a spec file's path, a mapping or a Spec, not a "
                        f"{type(spec).__name__}")
    path = Path(spec)
    if not overrides:
        return read_spec(path)
    from pflpipe.errors import SpecError

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(f"{path}: cannot read the spec ({err})") from None
    return parse_spec(text, str(path), overrides, source="override")


def compile(spec: "Spec | str | Path", output: "str | Path | None" = None,  # noqa: A001
            **overrides: Any) -> Path:
    """Write the spec's KFP pipeline (IR YAML) to `output` (default ``<name>.yaml``)."""
    from pflpipe.pipelines.compiler import compile_pipeline

    resolved = load_spec(spec, **overrides)
    return compile_pipeline(resolved,
                            Path(output or layout.compiled_pipeline(resolved.experiment.name)))


@dataclass(frozen=True)
class RunResult:
    """What `run` wrote: the run's folder, its report and tables, and its MLflow parent run."""

    spec: Spec
    run_dir: Path                 # results/<name>/runs/<time>-<run>/
    report_dir: Path
    seed_dirs: dict[int, Path]
    mlflow_run_id: str            # empty when tracking is off
    tracking_uri: str
    experiment: str
    stages: tuple[tuple[str, str], ...] = ()   # (task, SUCCESS | CACHED), in the order they ended
    #: A sweep's points by label, each as a run of its own (report_dir: the sweep's report).
    points: dict[str, "RunResult"] = field(default_factory=dict)

    @property
    def report_html(self) -> Path:
        """The self-contained HTML report."""
        return self.report_dir / layout.REPORT_HTML

    @cached_property
    def report(self) -> dict:
        """report.json: every metric per split and model, the answers, the run's facts."""
        return json.loads((self.report_dir / layout.REPORT_JSON).read_text(encoding="utf-8"))

    @property
    def best(self) -> tuple[str, ...]:
        """The best-performing personalized models on the primary split (test).

        One name where the corrected paired test over seeds resolves the winner; several, the
        thesis vote's leader first, where the data cannot tell them apart, and every contender
        with one seed (training noise was not measured); empty when the run has fewer than two
        personalized models (nothing to compare). `report["verdicts"]["best"]["status"]` says
        which (`pflpipe.metrics.pairwise.Verdict.status`).
        """
        return verdict_top(self.report, "best")

    @property
    def fairest(self) -> tuple[str, ...]:
        """The fairest personalized models on the primary split (test), as `best`."""
        return verdict_top(self.report, "fairest")

    @property
    def results(self):
        """Every seed's per-client table (results.csv) as one pandas DataFrame."""
        return self._frame(layout.RESULTS_CSV)

    @property
    def history(self):
        """Every model's per-round scores (history.csv of each model and seed) as a DataFrame."""
        return self._frame(f"*/{layout.HISTORY_CSV}")

    def _frame(self, pattern: str):
        import pandas as pd

        files = [f for d in self.seed_dirs.values() for f in sorted(d.glob(pattern))]
        return pd.concat([pd.read_csv(f) for f in files], ignore_index=True)


def run(spec: "Spec | str | Path", *, results: "str | Path | None" = None, resume: str = "all",
        quiet: bool = False, runner: str = "subprocess", **overrides: Any) -> RunResult:
    """Run the spec's pipeline on the local kfp runner, as ``pflpipe run`` does.

    Args:
        spec: a spec file or a `Spec`.
        results: the results directory (default: the spec's ``experiment.output_dir``).
        resume: "all" reuses the cached stages and finished checkpoints of earlier runs;
            "unfinished" recomputes finished stages (``--no-cache``); "none" recomputes
            everything (``--fresh``).
        quiet: print nothing (else a line per stage and where everything is, as the CLI).
        runner: "subprocess" (every task a process of this Python) or "docker" (every task in
            its stage's image, as ``pflpipe run --runner docker``; docs/images.md).
        **overrides: spec settings, e.g. ``federation={"rounds": 50}``.

    Raises:
        SpecError: the spec or an override is invalid.
        StageFailed: a stage failed; the message carries its error and log file.

    """
    import io
    import sys

    from rich.console import Console

    from pflpipe.cli.run_verb import execute, with_results_dir, with_run_control

    resolved = with_run_control(with_results_dir(load_spec(spec, **overrides),
                                                 Path(results) if results is not None else None))
    text = Path(spec).read_text(encoding="utf-8") if not isinstance(spec, Spec) else None
    console = Console(file=io.StringIO() if quiet else sys.stdout, highlight=False,
                      soft_wrap=True)
    outcome = execute(resolved, text, console, resume=resume, runner=runner)
    parent = outcome.parent
    stages = tuple((task.title, task.status) for task in outcome.tasks)

    def result(spec: Spec, prefix: str = "") -> RunResult:
        copies = {k.removeprefix(prefix): v for k, v in outcome.copies.items()
                  if k.startswith(prefix)}
        return RunResult(spec, outcome.run_dir.absolute(),
                         copies[layout.REPORT_FOLDER].absolute(),
                         {int(k.split("-", 1)[1]): v.absolute() for k, v in copies.items()
                          if k.startswith("seed-")},
                         parent.run_id, parent.tracking_uri, parent.experiment, stages)

    from pflpipe.spec.sweep import points

    found = {p.label: result(p.spec, layout.point_folder(p.label) + "/")
             for p in points(resolved)} if resolved.sweep else {}
    return replace(result(resolved), points=found)
