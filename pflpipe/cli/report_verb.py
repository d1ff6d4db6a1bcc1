"""``pflpipe report TABLE.csv [...] -o DIR``: the fairness report of any per-client table."""

from pathlib import Path

from pflpipe.layout import (
    PAIRWISE_CSV,
    POINT_JSON,
    POINTS,
    REPORT_HTML,
    REPORT_JSON,
    REPORT_MD,
    SWEEP_JSON,
)


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "report", help="Evaluate a per-client accuracy table: performance, fairness, report.",
        description="Evaluate one or more per-client results tables (columns client, model, "
        "accuracy; optional seed, split, selection, loss, n_samples, round) and write "
        f"{REPORT_JSON}, {REPORT_MD}, {REPORT_HTML}, {PAIRWISE_CSV} and figures into DIR. A "
        "model is named best or fairest only where a Holm-corrected paired test separates it "
        "from every other; otherwise the models tied at the top are. Given a sweep's run folder "
        "(results/<name>/latest), rebuild the sweep's report of every point side by side. Exit "
        "2 on a bad table.")
    parser.add_argument("tables", nargs="+", type=Path, metavar="TABLE.csv",
                        help="Per-client tables, or one sweep run folder.")
    parser.add_argument("-o", "--output", type=Path, default=Path("report"), metavar="DIR",
                        help="Output directory (default: ./report).")
    parser.add_argument("--local", default="local", metavar="NAME",
                        help="Model name of the local-only baseline L (default: local).")
    parser.add_argument("--global", dest="global_", default="fedavg", metavar="NAME",
                        help="Model name of the global baseline G (default: fedavg).")
    parser.add_argument("--selection", choices=("best_val", "last_round"), default="best_val",
                        help="Which recorded per-client model to evaluate (default: best_val).")
    parser.add_argument("--unit", choices=("auto", "fraction", "percent", "neg_mse"),
                        default="auto",
                        help="Unit of the accuracy column; auto (default) detects fractions or "
                        "percent and refuses a table mixing them; neg_mse reads a regression's "
                        "loss column (MSE).")
    parser.add_argument("--force", action="store_true",
                        help="Write into DIR even when it holds files `pflpipe report` did not "
                        "write there (a run's report, your files, your edits): the report's "
                        "files replace theirs by name; nothing else is touched.")
    parser.set_defaults(handler=run)


def run(args) -> int:
    """Build the report; print the two answers per split and where the files are."""
    from pflpipe.cli.text import paragraphs
    from pflpipe.overwrite import claim_dir
    from pflpipe.report.report_writer import build_report, write_report
    from pflpipe.report.results_reader import read_table

    if len(args.tables) == 1 and (args.tables[0] / POINTS).is_dir():
        return _sweep(args)
    table = read_table(args.tables, unit=args.unit)
    report = build_report(table, local=args.local, global_=args.global_,
                          selection=args.selection)
    claim = claim_dir(args.output, "pflpipe report", force=args.force)
    files = write_report(report, args.output)
    claim.record(files.written)
    unit = {"fraction": "accuracies in fractions", "percent": "accuracies in percent",
            "neg_mse": "scores are −MSE (a regression)"}[report.unit]
    print(f"{len(table.rows)} rows from {len(args.tables)} table(s); {unit}; "
          f"selection {args.selection}")
    print(paragraphs(report.answers()))
    print(f"report: {files.html}  ({files.json.name}, {files.markdown.name}, "
          f"{len(files.figures)} figures in {files.out_dir / 'figures'})")
    return 0


def _sweep(args) -> int:
    """Rebuild a published sweep's report (`pflpipe.report.sweep_report`) into --output."""
    from pflpipe.cli.text import paragraphs
    from pflpipe.errors import DataError
    from pflpipe.overwrite import claim_dir
    from pflpipe.report.sweep_report import read_sweep, write_sweep_report

    run_dir = args.tables[0]
    found = read_sweep(run_dir, args.output)
    if not found:
        raise DataError(f"{run_dir / POINTS}: no {POINT_JSON} in any point's folder; give the "
                        "folder of a sweep's run (results/<name>/latest)")
    claim = claim_dir(args.output, "pflpipe report", force=args.force)
    files = write_sweep_report(found, args.output, f"{run_dir.name}: sweep of {len(found)} "
                               "points")
    claim.record(files)
    for point in found:
        print(paragraphs(f"{point.label}: {separated_line(point)}"))
    print(f"report: {args.output / REPORT_HTML}  ({SWEEP_JSON}, {REPORT_MD})")
    return 0


def separated_line(point) -> str:
    """What the point's data separate (`pflpipe.report.sweep_report.separated`)."""
    from pflpipe.report.sweep_report import separated

    return separated(point)
