"""One table of docs/results.md from a `pflpipe run` results directory, in one command.

Reads what the run wrote (each seed's results.csv, each tuned entry's tuning.json via the report's
tuning section, report.json's compute warning) and the spec it ran, and prints a Markdown section:
per model the mean client test accuracy of the personalized models at each client's best-validation
round and after the last round, the global model's (GA) after the last round, mean ± sd over the
reported seeds, with its 95 % interval (over the seeds, or a bootstrap over the clients of one
seed) and every pair of models compared (Holm-corrected paired tests: which gaps are resolved); the
compute each model cost (the engine's own counts in results.csv, summed over clients, mean over
seeds); the tuning grids with every point's validation score per tuning seed and
the chosen point; and which seeds chose settings and which are reported. Nothing is retrained, so
the table can be redone whenever the run is (e.g. after a change to the compute counting).

    pflpipe run specs/results-digits.yaml --results DIR
    python benchmarks/results_tables.py specs/results-digits.yaml DIR/latest [--out FILE.md]

--out replaces the text between this table's markers (named after the experiment) in the file,
or appends the section. --commit names the commit whose code (and compute counting) ran.
docs/results.md's tables are written by benchmarks/pages.py, which runs each result spec and
calls `section` on its run folder.
"""

import argparse
import csv
import json
import statistics
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np

from pflpipe import layout
from pflpipe.markdown import replace_section
from pflpipe.metrics.pairwise import compare_cells, top_with
from pflpipe.metrics.results_table import client_key
from pflpipe.metrics.uncertainty import mean_interval
from pflpipe.report.pairwise_section import UNMEASURED, pairs_markdown
from pflpipe.report.pairwise_section import describe as describe_gap
from pflpipe.spec import read_spec

REPO = Path(__file__).resolve().parent.parent
COMPUTE = ("steps", "samples", "bytes_sent", "bytes_received")
HISTORY = layout.HISTORY_CSV
SEEDS = layout.seed_folder(0).replace("0", "*")  # seed-*


def rows_of(run: Path) -> list[dict]:
    """Every seed's results.csv rows of the run (seed-N/results.csv), test split only."""
    rows = []
    for path in sorted(run.glob(f"{SEEDS}/{layout.RESULTS_CSV}")):
        with path.open() as f:
            rows += [r for r in csv.DictReader(f) if r["split"] == "test"]
    if not rows:
        raise SystemExit(f"{run}: no seed-*/results.csv (give a run folder, e.g. DIR/latest)")
    return rows


def per_seed(rows: list[dict]) -> dict:
    """model → seed → {pa_best, pa_last, ga_last, compute…}: client means and client sums."""
    acc = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in rows:
        key = ("ga" if r["scope"] == "global" else "pa") + "_" + r["selection"].split("_")[0]
        acc[r["model"]][int(r["seed"])][key].append(float(r["accuracy"]))
        if r["scope"] == "" and r["selection"] == "best_val" and r.get("steps", "") != "":
            for name in COMPUTE:
                acc[r["model"]][int(r["seed"])][name].append(float(r[name]))
    out = defaultdict(dict)
    for model, seeds in acc.items():
        for seed, cols in seeds.items():
            out[model][seed] = {k: (sum(v) if k in COMPUTE else statistics.fmean(v))
                                for k, v in cols.items()}
    return out


def cells_of(rows: list[dict], selection: str = "best_val") -> dict[str, np.ndarray]:
    """model → [S, K] personalized test accuracies at `selection` (seeds × clients, id order)."""
    by = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if r["split"] == "test" and r["scope"] == "" and r["selection"] == selection:
            by[r["model"]][int(r["seed"])][r["client"]] = float(r["accuracy"])
    return {model: np.array([[clients[c] for c in sorted(clients, key=client_key)]
                             for _, clients in sorted(seeds.items())])
            for model, seeds in by.items()}


def interval(cells: np.ndarray | None) -> str:
    """The 95 % interval of a model's mean accuracy in percent, e.g. ``[70.0, 80.0]``."""
    if cells is None:
        return "—"
    found = mean_interval(cells)
    if found.low is None:  # no spread over the units: nothing to estimate an interval from
        return "—"
    return f"[{found.low * 100:.1f}, {found.high * 100:.1f}]"


def pairwise_lines(spec, cells: dict[str, np.ndarray]) -> list[str]:
    """Every pair of models on PA best-val, Holm-corrected, and the models tied at the top."""
    if len(cells) < 2:
        return []
    pairs = compare_cells({m: cells[m] for m in ordered(spec, cells)})
    best = max(cells, key=lambda m: cells[m].mean())
    top = top_with(best, sorted(cells, key=lambda m: -cells[m].mean()), pairs)
    seeds, clients = next(iter(cells.values())).shape
    over = (f"over the {seeds} reported seeds (paired t-test on the per-seed means)" if seeds > 1
            else f"over the {clients} clients of the one reported seed (Wilcoxon signed-rank and "
                 "its Hodges–Lehmann interval)")
    unresolved = [f"{m} ({describe_gap(pair, best, 'fraction')})" for m in top[1:]
                  for pair in pairs if {pair.a, pair.b} == {best, m}]
    return [f"Pairwise, PA best-val {over}, Holm-corrected over all {len(pairs)} pairs; Δ in "
            "percentage points:", "", f"<details><summary>Every pair ({len(pairs)})</summary>", "",
            *pairs_markdown(pairs), "", "</details>", "",
            f"Best mean: {best}; " + (f"not separated from it: {'; '.join(unresolved)}."
                                      if unresolved else "resolved ahead of every other model.")
            + (f" With one seed, {UNMEASURED}." if seeds == 1 else ""),
            ""]


def mean_sd(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    if not values:
        return "—"
    mean = statistics.fmean(values) * scale
    sd = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def setting(entry, chosen: dict | None) -> str:
    """What distinguishes an entry: its non-default fields, the tuned ones marked."""
    data = entry.model_dump(exclude_defaults=True, exclude={"name", "label", "warm_start"})
    data.update(chosen or {})
    bold = lambda k: "**" if chosen and k in chosen else ""  # noqa: E731
    return ", ".join(f"{k} {bold(k)}{v}{bold(k)}" for k, v in data.items()) or "defaults"


def describe(spec, model: str, chosen: dict) -> str:
    """The setting column: the entry's non-default fields, what the model's compute leaves out."""
    entries = {(e.label or e.name): e for e in spec.personalization}
    if model == "fedavg":
        return "the warm start: the federation section"
    if model not in entries:
        return "local baseline" if model == spec.local_params.display_name else "PersFL"
    entry = entries[model]
    if entry.name == "persfl":
        return "(λ, T) chosen per client on its validation split; teachers: FedAvg's rounds"
    text = setting(entry, chosen.get(model))
    if getattr(entry, "warm_start", "none") != "none":
        text += "; from FedAvg's model (its compute not included)"
    return text


def ordered(spec, stats: dict) -> list[str]:
    """Models in the order the spec names them: FedAvg, local, PersFL, then its entries."""
    order = list(dict.fromkeys(["fedavg", spec.local_params.display_name, "persfl",
                                *(e.label or e.name for e in spec.personalization)]))
    return [m for m in order if m in stats] + sorted(m for m in stats if m not in order)


def model_table(spec, stats: dict, chosen: dict, cells: dict | None = None) -> list[str]:
    lines = ["| model | setting (**tuned**) | PA best-val % | 95 % CI | PA last % | GA last % | "
             "steps | samples (k) | sent / received (MB) | PA best-val per seed |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for model in ordered(spec, stats):
        s = [stats[model][k] for k in sorted(stats[model])]

        def col(key: str, s=s) -> list[float]:
            return [v[key] for v in s if key in v]

        steps, samples = col("steps"), col("samples")
        sent, received = col("bytes_sent"), col("bytes_received")
        compute = ["—"] * 3 if not steps else [
            f"{statistics.fmean(steps):,.0f}", f"{statistics.fmean(samples) / 1e3:,.1f}",
            f"{statistics.fmean(sent) / 1e6:.2f} / {statistics.fmean(received) / 1e6:.2f}"]
        ga = col("pa_last") if model == "fedavg" else col("ga_last")  # FedAvg's model is global
        by_seed = " / ".join(f"{v['pa_best'] * 100:.1f}" for v in s)
        lines.append(f"| {model} | {describe(spec, model, chosen)} "
                     f"| {mean_sd(col('pa_best'))} | {interval((cells or {}).get(model))} "
                     f"| {mean_sd(col('pa_last'))} | {mean_sd(ga)} | {' | '.join(compute)} "
                     f"| {by_seed} |")
    return lines


def step_counts(run: Path, column: str = "diag.local_steps") -> list[str]:
    """Self-FL's ℓ_m per client-round (the train rows where Eqn. 8 applied), per model."""
    lines = []
    for model_dir in sorted({p.parent.name for p in run.glob(f"{SEEDS}/*/{HISTORY}")}):
        values = []
        for path in run.glob(f"{SEEDS}/{model_dir}/{HISTORY}"):
            with path.open() as f:
                values += [float(r[column]) for r in csv.DictReader(f)
                           if r.get(column) not in (None, "", "nan")]
        if values:
            lines.append(f"| {model_dir} | {min(values):.0f} | {statistics.median(values):.0f} | "
                         f"{statistics.fmean(values):.1f} | {max(values):.0f} | {len(values)} |")
    if not lines:
        return []
    return ["Local steps ℓ_m that Eqn. 8 gave (`diag.local_steps`, client-rounds where it "
            "applied, all reported seeds):", "",
            "| model | min | median | mean | max | client-rounds |",
            "|---|---:|---:|---:|---:|---:|",
            *lines, ""]


def tuning_table(tuning: dict | None) -> list[str]:
    if not tuning:
        return ["No entry was tuned."]
    seeds = [str(s) for s in tuning["seeds"]]
    lines = ["| entry | grid point | " + " | ".join(f"val % seed {s}" for s in seeds)
             + " | mean | chosen |", "|---|---|" + "---:|" * (len(seeds) + 1) + "---|"]
    for entry, info in tuning["entries"].items():
        for point in info["points"]:
            values = ", ".join(f"{k} {v}" for k, v in point["values"].items())
            scores = " | ".join(f"{point['scores'][s] * 100:.1f}" for s in seeds)
            mark = "✓" if point["values"] == info["chosen"] else ""
            lines.append(f"| {entry} | {values} | {scores} | {point['mean'] * 100:.1f} | {mark} |")
    return lines


def read_report(spec, run: Path) -> dict:
    """report.json; for a run stopped before evaluate_fairness, what the seeds' folders tell."""
    path = run / "report" / layout.REPORT_JSON
    if path.is_file():
        return json.loads(path.read_text())
    seeds = sorted(int(p.parent.name.split("-")[1])
                   for p in run.glob(f"{SEEDS}/{layout.RESULTS_CSV}"))
    from pflpipe.stages.evaluate_fairness import rounds_line

    records = {}  # label → its kept tuning record: the report's Rounds line counts the choice
    for kept in sorted(run.glob(f"{SEEDS}/*/{layout.TUNING_JSON}")):
        whole = json.loads(kept.read_text())
        records.update({label: whole for label in whole["entries"]})
    entries = {label: record["entries"][label] for label, record in records.items()}
    tuning = {"seeds": whole["seeds"], "entries": entries} if entries else None
    return {"tuning": tuning, "run": {
        "data": f"{spec.dataset.name}, {spec.partition.strategy}, {spec.partition.n_clients} "
                "clients; no report: the run stopped before evaluate_fairness",
        "seeds": ", ".join(map(str, seeds)), "rounds": rounds_line(spec, records)}}


def section(spec_path: Path, run: Path, commit: str, ran_by: str = "`pflpipe run`",
            standalone: bool = True) -> str:
    """The Markdown section of one run: its facts, the model table, the tuning table.

    `standalone` False leaves out the markers, who ran it and the columns' definitions, which a
    page that names its blocks' sources gives once (benchmarks/pages.py).
    """
    spec = read_spec(spec_path)
    report = read_report(spec, run)
    tuning = report.get("tuning")
    chosen = {k: v["chosen"] for k, v in (tuning or {}).get("entries", {}).items()}
    name = spec.experiment.name
    rows = rows_of(run)
    stats, cells = per_seed(rows), cells_of(rows)
    seeds = sorted({seed for by_seed in stats.values() for seed in by_seed})  # the rows' seeds
    tuned = sorted(chosen)
    untuned = [e.label or e.name for e in spec.personalization if (e.label or e.name) not in chosen]
    provenance = [
        f"Run by {ran_by} at commit {commit} (its compute counting: "
        "`pflpipe/engine/accounting.py` there); regenerated by", "",
        f"    python benchmarks/results_tables.py {spec_path} RUN_DIR", ""]
    definitions = [
        "PA: each client's personalized model on its own test split, the unweighted mean over "
        "clients (best-val: each client's round chosen on its validation split; last: after the "
        "last round); GA: the model's global model after the last round; mean ± sd over the "
        "reported seeds; its 95 % interval over the seeds (t), or over the clients of one seed "
        "(bootstrap). Compute: the engine's counts for the whole run (local gradient steps, "
        "samples through forward and backward, parameters sent and received), summed over clients, "
        "mean over seeds.", ""]
    lines = [
        f"### `{spec_path.relative_to(REPO) if spec_path.is_absolute() else spec_path}` "
        f"({report['run']['data']})", "",
        *(provenance if standalone else []),
        f"- **Reported seeds** {', '.join(map(str, seeds))}; **tuning seeds** "
        + (", ".join(str(s) for s in tuning["seeds"]) if tuning else "none")
        + " (validation splits only, never reported; the spec's validation refuses an overlap).",
        f"- Rounds: {report['run']['rounds']}.",
        f"- Tuned on the tuning seeds: {', '.join(tuned) or 'none'}; run as written: "
        f"{', '.join(untuned) or 'none'}.", "",
        *(definitions if standalone else []),
        *model_table(spec, stats, chosen, cells), "",
        *pairwise_lines(spec, cells),
        *step_counts(run),
    ]
    if report.get("compute_warning"):  # a gap by design is a note, not a warning
        says = "notes" if report.get("compute_by_design") else "warns"
        lines += [f"The report {says}: {report['compute_warning']}", ""]
    lines += ["Tuning (validation accuracy, mean over clients of each client's best-val model):",
              "", *tuning_table(tuning)]
    begin, end = markers(name)
    return "\n".join([begin, *lines, end] if standalone else lines)


def markers(name: str) -> tuple[str, str]:
    """The lines around experiment `name`'s section."""
    return tuple(f"<!-- benchmarks/results_tables.py: {name} {m} -->" for m in ("begin", "end"))


def write(out: Path, text: str, name: str) -> None:
    replace_section(out, text, *markers(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path, help="the spec the run ran")
    parser.add_argument("run", type=Path, help="the run's folder (RESULTS/latest or runs/<id>)")
    parser.add_argument("--out", type=Path, help="write the section into this Markdown file")
    parser.add_argument("--commit", default=None, help="the commit that ran (default: HEAD)")
    parser.add_argument("--ran-by", default="`pflpipe run`",
                        help="what ran it, for the text (e.g. benchmarks/results_run.py)")
    args = parser.parse_args()
    commit = args.commit or subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False).stdout.strip()
    text = section(args.spec, args.run, commit, args.ran_by)
    if args.out:
        write(args.out, text, read_spec(args.spec).experiment.name)
    print(text)


if __name__ == "__main__":
    main()
