"""The fairness report: report.json, report.md, a self-contained report.html and the figures.

`build_report` evaluates a results table; `write_report` writes the files (figures also as PNG).

report.json::

    {"format": 1, "unit": "fraction" | "percent", "selection": "best_val",
     "baselines": {"local": "local", "global": "fedavg"}, "primary_split": "test",
     "models": {MODEL: ...},            # the primary split's models (test if present)
     "best": MODEL | null, "fairest": MODEL | null, "answer": "...",   # primary split
     "verdicts": {"best" | "fairest": ...},   # the primary split's (see "uncertainty")
     "splits": {SPLIT: {"models": {MODEL: {
                            "role": "personalized" | "local baseline" | "global baseline",
                            "performance": {"PUI", "PUD", "MPI", "API", "MPD", "APD", "AA"},
                            "fairness": {"improved" | "decreased" | "accuracy":
                                         {"AV", "CS", "Entropy", "JI"}},
                            "accuracy": {"AA", "std", "min", "bottom_decile",
                                         "top_samples_decile"},
                            "std_over_seeds": {same nesting; null with one seed},
                            "reasons": {"performance.MPD": "U⁻ is empty: ...", ...},
                            "n_clients", "seeds", "per_client": {CLIENT: {"accuracy", "qoi"}}}},
                        "best": MODEL | null, "fairest": MODEL | null, "answer": "...",
                        "decisions": {"best" | "fairest": {"model", "votes", "winners",
                                                           "tie_break", "reason"}},
                        "uncertainty": {"over": "seeds" | "clients", "n", "level", "alpha",
                                        "resamples", "intervals": {MODEL: {PATH: {"low",
                                        "high", "over", "n"[, "reason"]}}},
                                        "verdicts": {"best" | "fairest": {"metric", "leader",
                                        "winner", "top", "resolved", "status",
                                        "ahead_over_clients", "reason", "pairs": [...]}},
                                        "baselines": [...]},   # vs global and local
                        "clients": [...], "seeds": [...], "figures": {...},
                        "generalization": {MODEL: {"GA", "PA", "beats_global",
                                                   "std_over_seeds", "n_clients"}}}},
     "rules": {"best", "fairest", "seeds", "nulls", "uncertainty"}, "protocol": "...",
     "sources": [...],
     "compute": {MODEL: {COUNT: own}}, "compute_in_all": {MODEL: {COUNT: warm start included}},
     "warm_starts": {MODEL: round}, "compute_warning": "..." | null,
     "compute_by_design": bool,        # the gap is the method's own cost: a note, not a warning
     "stability": {MODEL: {"selected", "last_round", "late_fall", "late_fall_rounds",
                           "margins", "far_below", "swings"}},    #
                           `pflpipe.report.stability_section`
     "notes": ["MODEL: ...", ...]}      # what the scores do not show
     (`pflpipe.report.report_notes`)

Metric values are means over seeds; a null value has its reason in the model's "reasons".
"decisions" hold the thesis's vote; "best" and "fairest" name a model only where the
Holm-corrected paired test over two or more seeds resolves the vote's leader against every other
contender (`pflpipe.metrics.pairwise`), and each verdict's "top" lists the models tied at the top
and its "status" says why (docs/verdicts.md).
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pflpipe import layout
from pflpipe.compute import in_all, totals
from pflpipe.metrics import generalization, pairwise
from pflpipe.metrics.fairness import FAIRNESS
from pflpipe.metrics.performance import ACCURACY, PERFORMANCE
from pflpipe.metrics.results_table import ResultsTable, measure
from pflpipe.metrics.summary import BEST_RULE, FAIREST_RULE, SplitSummary, summarize
from pflpipe.report import compute_section, generalization_section, glossary
from pflpipe.report import pairwise_section as pairwise_report
from pflpipe.report import rendering as render
from pflpipe.report import report_figures as figures
from pflpipe.report import report_notes as notes
from pflpipe.report import score_curves as curves
from pflpipe.report import stability_section as stability
from pflpipe.report import tuning_section as tuning
from pflpipe.report.stability_section import Stability

#: Every metric name the report knows (the spec's `evaluation.metrics` choose among them).
ALL_METRICS = tuple(dict.fromkeys((*PERFORMANCE, *FAIRNESS, *ACCURACY)))
TITLE = "pflpipe fairness report"


#: The selection rule of a pipeline run whose partition has no validation split.
NO_VALIDATION = (
    "The partition has no validation split, so nothing is chosen on validation: each client's "
    "'best_val' model is its last round (or epoch), the same as 'last_round'; PersFL's teacher "
    "is the last warm-start round and its (λ, T) is chosen on the client's train split. Test "
    "is never used to choose."
)


def protocol(selection: str, local: str, global_: str, validation: bool | None = None,
             unit: str = "fraction") -> str:
    """Describe how the per-client numbers were produced.

    `validation` False says the run had no validation split and states the rule used instead;
    `unit` names the score (accuracy, or −MSE for a regression).
    """
    score = measure(unit)
    chosen = {"best_val": "the model best on validation", "last_round": "the last-round model"}
    rule = (NO_VALIDATION if validation is False else
            "A personalized model's round (or epoch) is chosen for each client on that client's "
            "validation split. The warm start's global model (FedAvg) is one model, so its "
            "best-on-validation round is one round for every client: the round with the best "
            "mean validation accuracy over the clients, weighted by their samples. An algorithm's "
            "own global model is scored at the round its personalized model was chosen. Round 0, "
            "the model a run started from (the warm start, or the initial model), is never "
            "chosen when the run trained a round: a model is scored only at rounds it trained "
            "(the notes count the clients that validated better at round 0). Test is "
            "never used to choose; both the last-round and the best-on-validation models are "
            f"recorded, and this report evaluates {chosen[selection]} ({selection}).")
    return (
        f"Each client is scored on its own test split with its personalized model. {rule} "
        f"QoI_i = P_i − max(G_i, L_i) "
        f"compares each client's personalized {score} P with the better of its global ({global_!r}"
        f", G) and local-only ({local!r}, L) {score} (thesis eq. 5.2). A 'val' split, when "
        f"present, is reported too but is the split the model was chosen on."
    )


@dataclass(frozen=True)
class ReportContext:
    """What a pipeline run adds to the table: the run, the curves, the pictures, the tables.

    Attributes:
        run: Facts about the run, shown first (spec hash, MLflow run, rounds, ...).
        history: history.csv rows of every model and seed (model, round, split, accuracy).
        images: PNG files to show, by name: label heatmap, teacher rounds, λ–T; each with its
            caption.
        links: (text, relative href) of the per-seed results tables.
        tuning: Each tuned entry's grid, scores and choice, the tuning and reported seeds and
            the untuned entries (`pflpipe.report.tuning_section`); empty without tuning.
        plan: What the spec scheduled per model: its warm-start round, its epochs
            (`pflpipe.report.compute_section`); compute is counted in all, the warm start included.

    """

    run: dict[str, str] = field(default_factory=dict)
    history: tuple[dict, ...] = ()
    images: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    links: tuple[tuple[str, str], ...] = ()
    #: Warn when the compared models' samples processed differ by more than this factor.
    compute_mismatch: float = 1.5
    #: The `images` that show what a mechanism chose (PersFL's teacher rounds, λ and T): shown
    #: with the mechanism diagnostics.
    mechanism_images: tuple[str, ...] = ()
    tuning: dict = field(default_factory=dict)
    plan: in_all.Plan = field(default_factory=in_all.Plan)


@dataclass(frozen=True)
class Report:
    """The evaluated table: one `SplitSummary` per split, plus how it was made."""

    splits: dict[str, SplitSummary]
    unit: str
    selection: str
    local: str
    global_: str
    metrics: tuple[str, ...] = ALL_METRICS
    sources: tuple[str, ...] = ()
    validation: bool | None = None   # False: the run had no validation split (see protocol)
    context: ReportContext = field(default_factory=ReportContext)
    #: GA, PA and beats_global per split and model (`pflpipe.metrics.generalization`).
    comparisons: dict[str, dict[str, generalization.Comparison]] = field(default_factory=dict)
    #: Intervals, pairwise tests and gated verdicts per split (`pflpipe.metrics.pairwise`).
    uncertainty: dict[str, pairwise.Assessment] = field(default_factory=dict)
    #: The primary split's selected and last-round scores per model
    #: (`pflpipe.report.stability_section`).
    stability: dict[str, Stability] = field(default_factory=dict)
    #: Per split, what its accuracy summaries need said (`pflpipe.report.report_notes`).
    notes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def primary(self) -> SplitSummary:
        """The split the top-level answers refer to: test when present."""
        return self.splits.get("test") or next(iter(self.splits.values()))

    def answered(self) -> list[SplitSummary]:
        """The splits the headline answers: not val beside another split (it chose the models)."""
        return [s for s in self.splits.values() if s.split != "val" or s is self.primary]

    def answers(self) -> str:
        """Return the two answers of every answered split, one line per split."""
        return "\n".join(self.answer(summary.split) for summary in self.answered())

    def answer(self, split: str) -> str:
        """The split's answers, naming a model only where the corrected paired test does."""
        summary, assessment = self.splits[split], self.uncertainty.get(split)
        return pairwise_report.answer(summary, assessment) if assessment else summary.answer()

    def to_json(self, figure_files: dict[str, dict[str, str]] | None = None) -> dict:
        """Return report.json's content (see the module docstring)."""
        splits = {name: {**_split_json(s, (figure_files or {}).get(name, {}),
                                       self.uncertainty.get(name)),
                         "generalization": {m: c.to_json() for m, c in
                                            self.comparisons.get(name, {}).items()}}
                  for name, s in self.splits.items()}
        primary = splits[self.primary.split]
        found = self.unequal_compute()
        return {
            "format": 1, "unit": self.unit, "selection": self.selection,
            "baselines": {"local": self.local, "global": self.global_},
            "primary_split": self.primary.split, "models": primary["models"],
            "best": primary["best"], "fairest": primary["fairest"], "answer": primary["answer"],
            "verdicts": primary.get("uncertainty", {}).get("verdicts", {}),
            "splits": splits,
            "rules": {"best": BEST_RULE, "fairest": FAIREST_RULE, "seeds": render.SEED_RULE,
                      "nulls": render.NULL_RULE, "uncertainty": pairwise.RULE},
            "protocol": protocol(self.selection, self.local, self.global_, self.validation,
                                 self.unit),
            "sources": list(self.sources), "run": dict(self.context.run),
            "tables": dict(self.context.links),
            "compute": totals.totals(self.context.history),
            "compute_in_all": in_all.in_all(self.context.history, self.context.plan),
            "warm_starts": dict(self.context.plan.starts),
            "compute_warning": found.text if found else None,
            "compute_by_design": bool(found and found.by_design),
            "stability": {m: s.to_json() for m, s in self.stability.items()},
            "notes": self.model_notes(),
            **({"tuning": self.context.tuning} if self.context.tuning else {}),
        }

    def blocks(self, figure_files: dict[str, dict[str, str]] | None = None) -> list[tuple]:
        """Return the report's content as render blocks (see `pflpipe.report.rendering`)."""
        unit = render.UNIT_TEXT[self.unit]
        out: list[tuple] = [("h1", TITLE)]
        if self.context.run:
            out += [("h2", "Run"), ("table", ["", "value"], [[k, v] for k, v in
                                                         self.context.run.items()])]
        if self.context.links:
            out += [("p", "Per-client results tables (every model, split and selection):"),
                    ("links", list(self.context.links))]
        out += [
            ("p", f"Scores ({measure(self.unit)}): {unit}. QoI, MPI, API, MPD, APD, AA, std, "
                  f"min, the bottom-decile mean and the top-samples-decile mean are in this "
                  f"unit; PUI and PUD are % of clients; AV is in "
                  f"unit²; CS, Entropy and JI have no unit. Baselines: local {self.local!r}, "
                  f"global {self.global_!r}. Tables: {', '.join(self.sources) or '(in memory)'}."),
            ("h2", "Protocol"),
            ("p", protocol(self.selection, self.local, self.global_, self.validation, self.unit)),
            *tuning.blocks(self.context.tuning),
            ("h2", "Answers"), ("list", [self.answer(s.split) for s in self.answered()]),
            *([("h2", "Notes"), ("list", self.model_notes())] if self.model_notes() else []),
        ]
        out += stability.blocks(self.stability, self.primary.split, self.selection, self.unit)
        out += self._compute_blocks()
        for name, summary in self.splits.items():
            out += render.split_blocks(summary, self.metrics, (figure_files or {}).get(name, {}),
                                       self.answer(name), self.notes.get(name, ()))
            if name in self.uncertainty:
                out += pairwise_report.blocks(self.uncertainty[name], summary, self.metrics)
            comparisons = self.comparisons.get(name, {})
            if any(c.mean["GA"] is not None and c.mean["PA"] is not None
                   for c in comparisons.values()):
                out += generalization_section.blocks(comparisons, name, self.unit)
        out += self._diagnostic_blocks()
        pictures = [(f"{layout.FIGURES}/{n}", caption)
                    for n, (_, caption) in self.context.images.items()
                    if n not in self.context.mechanism_images]
        if pictures:
            out += [("h2", "The split"),
                    *(("figure", name, caption) for name, caption in pictures)]
        return out + render.rule_blocks(pairwise.RULE) + glossary.section()

    def unequal_compute(self) -> in_all.Mismatch | None:
        """The compared models' (all but the baselines) unequal compute in all, if any."""
        history, plan = self.context.history, self.context.plan
        return in_all.mismatch(in_all.in_all(history, plan), (self.local, self.global_),
                             self.context.compute_mismatch, plan, totals.totals(history))

    def model_notes(self) -> list[str]:
        """What the scores do not show, per model (`pflpipe.report.report_notes`)."""
        return notes.model_lines(self.context.history, self.selection)

    def compute_warning(self) -> str | None:
        """The text of `unequal_compute` (a warning, or a note when the gap is by design)."""
        found = self.unequal_compute()
        return found.text if found else None

    def _compute_blocks(self) -> list[tuple]:
        if not totals.totals(self.context.history):
            return []
        found = self.unequal_compute()
        return [("h2", "Compute"),
                ("p", "What each model cost, counted by the engine from what it ran: local "
                      "optimizer steps; samples processed, a sample counted once per network "
                      "pass over it (forward and backward: pFedMe's K inner steps count it K "
                      "times, K Monte-Carlo draws K times; PersFL's training is every student "
                      "of its distillation grid); bytes uploaded and downloaded; summed over "
                      "clients and rounds, mean over seeds. Models are matched on samples. "
                      "Adaptation samples: the training before scoring (Per-FedAvg's "
                      "adaptation, Flow's re-personalization) at every evaluation, not "
                      "matched. Scoring, PersFL's teacher selection and its teachers' logits "
                      "are forward passes only and not counted. A model started from the FedAvg "
                      "warm start also cost the warm start's compute up to the round it started "
                      "from (PersFL: every round, its teachers): steps, samples and MB are "
                      "counted in all, the warm start included, and so is the figure. Passes "
                      "per sample and epoch: the model's own samples over the passes over its "
                      "clients' data its settings schedule (FedAvg 1, Ditto 2, PersFL its grid's "
                      "students)."),
                *([("p", f"**{'Note' if found.by_design else 'Warning'}.** {found.text}")]
                  if found else []),
                ("table", compute_section.TABLE_HEADER,
                 compute_section.table_rows(self.context.history, self.context.plan,
                                 list(self.primary.models))),
                ("figure", COMPUTE_FIGURE, "Accuracy against samples processed: one line per "
                 "model, a point per evaluated round.")]

    def _diagnostic_blocks(self) -> list[tuple]:
        series = totals.diagnostics(self.context.history)
        chosen = [(f"{layout.FIGURES}/{n}", caption)
                  for n, (_, caption) in self.context.images.items()
                  if n in self.context.mechanism_images]
        if not series and not chosen:
            return []
        return [("h2", "Mechanism diagnostics"),
                ("p", "What each algorithm's mechanism did per round (its `diagnostics` hooks, "
                      f"{layout.HISTORY_CSV} columns diag.*), mean over the round's clients and "
                      "the seeds; "
                      "PersFL's choices per client (teacher round, λ, T) beside them. The "
                      "table gives each diagnostic's value at its last recorded round (a "
                      "vector's entry i as name.i: Flow's routed layer k)."),
                *([("table", totals.DIAGNOSTICS_HEADER, totals.diagnostics_last(series))]
                  if series else []),
                *(("figure", _diagnostic_figure(m), f"{m}: diagnostics over rounds.")
                  for m in series),
                *(("figure", name, caption) for name, caption in chosen)]

    def to_markdown(self, figure_files: dict[str, dict[str, str]] | None = None) -> str:
        """Render report.md (figures as relative links when `figure_files` is given)."""
        return render.to_markdown(self.blocks(figure_files))


COMPUTE_FIGURE = layout.report_figure("accuracy_vs_samples")


def _diagnostic_figure(model: str) -> str:
    return layout.report_figure("diagnostics", model)


def _split_json(summary: SplitSummary, figure_files: dict[str, str],
                assessment: pairwise.Assessment | None = None) -> dict:
    gated = {} if assessment is None else {
        "best": assessment.best.winner, "fairest": assessment.fairest.winner,
        "answer": pairwise_report.answer(summary, assessment),
        "uncertainty": assessment.to_json()}
    return {
        "models": {m: r.to_json() for m, r in summary.models.items()},
        "best": summary.best.model, "fairest": summary.fairest.model,
        "answer": summary.answer(),
        "decisions": {"best": summary.best.to_json(), "fairest": summary.fairest.to_json()},
        "clients": list(summary.clients), "seeds": list(summary.seeds), "figures": figure_files,
    } | gated


def build_report(table: ResultsTable, *, local: str = "local", global_: str = "fedavg",
                 selection: str = "best_val", metrics: Sequence[str] = ALL_METRICS,
                 validation: bool | None = None, context: ReportContext | None = None) -> Report:
    """Evaluate a results table (see `summarize`); `metrics` chooses what md/html show.

    `validation` False states in the protocol that the run had no validation split; `context`
    adds a pipeline run's facts, curves and pictures.

    Raises:
        DataError: the table cannot be evaluated (a baseline or a client is missing).

    """
    unknown = sorted(set(metrics) - set(ALL_METRICS))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; choose among {', '.join(ALL_METRICS)}")
    splits = summarize(table, local=local, global_=global_, selection=selection)
    comparisons = generalization.compare(table, global_=global_, selection=selection)
    context = context or ReportContext()
    primary = "test" if "test" in splits else next(iter(splits))
    uncertainty = pairwise.assess(table, splits, local=local, global_=global_,
                                  selection=selection)
    return Report(splits, table.unit, selection, local, global_, tuple(metrics), table.sources,
                  validation, context, comparisons, uncertainty,
                  stability.assess(table, context.history, primary, selection),
                  {s: notes.accuracy_notes(table, s, metrics) for s in splits})


@dataclass(frozen=True)
class ReportFiles:
    """Where `write_report` put the report."""

    out_dir: Path
    json: Path
    markdown: Path
    html: Path
    figures: tuple[Path, ...]
    pairwise: Path | None = None

    @property
    def written(self) -> list[Path]:
        """Every file written, figures included."""
        return [self.json, self.markdown, self.html, *self.figures,
                *([self.pairwise] if self.pairwise else [])]


def draw_figures(report: Report) -> tuple[dict[str, bytes], dict[str, dict[str, str]]]:
    """Draw the report's figures: PNG bytes by path in the report folder, each split's files."""
    images: dict[str, bytes] = {}
    figure_files: dict[str, dict[str, str]] = {}
    history = list(report.context.history)
    for name, summary in report.splits.items():
        files = {"clients": layout.report_figure("client_accuracy", name),
                 "qoi": layout.report_figure("qoi", name),
                 "fairness": layout.report_figure("fairness", name)}
        if history and name == report.primary.split:  # the curves of the reported split
            files["rounds"] = layout.report_figure("accuracy_rounds", name)
            images[files["rounds"]] = curves.accuracy_rounds_png(
                history, name, list(summary.models), report.unit, report.context.plan.starts)
        images[files["clients"]] = curves.client_bars_png(summary)
        images[files["qoi"]] = figures.qoi_strip_png(summary)
        images[files["fairness"]] = figures.fairness_bars_png(summary, report.metrics)
        figure_files[name] = files
    if totals.totals(history):
        images[COMPUTE_FIGURE] = compute_section.accuracy_vs_samples_png(
            history, report.primary.split, list(report.primary.models),
            in_all.starting_samples(history, report.context.plan))
    for model, series in totals.diagnostics(history).items():
        images[_diagnostic_figure(model)] = compute_section.diagnostics_png(model, series)
    return images, figure_files


def write_report(report: Report, out_dir: Path,
                 drawn: tuple[dict[str, bytes], dict[str, dict[str, str]]] | None = None
                 ) -> ReportFiles:
    """Write report.json, report.md, report.html and figures/*.png into `out_dir`.

    `drawn` is what `draw_figures` returns for this report (a rerun keeps it); drawn here if None.
    """
    out_dir = Path(out_dir)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    images, figure_files = drawn or draw_figures(report)
    images = dict(images)
    images |= {f"{layout.FIGURES}/{n}": data for n, (data, _) in report.context.images.items()}
    for relative, data in images.items():
        (out_dir / relative).write_bytes(data)
    paths = ReportFiles(out_dir, out_dir / layout.REPORT_JSON, out_dir / layout.REPORT_MD,
                        out_dir / layout.REPORT_HTML, tuple(out_dir / r for r in images),
                        out_dir / layout.PAIRWISE_CSV)
    paths.pairwise.write_text(pairwise_report.pairwise_csv(report.uncertainty), encoding="utf-8")
    text = json.dumps(report.to_json(figure_files), indent=2, ensure_ascii=False)
    paths.json.write_text(text + "\n", encoding="utf-8")
    blocks = report.blocks(figure_files)
    paths.markdown.write_text(render.to_markdown(blocks), encoding="utf-8")
    paths.html.write_text(render.to_html(blocks, images, TITLE), encoding="utf-8")
    return paths
