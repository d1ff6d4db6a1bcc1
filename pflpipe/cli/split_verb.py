"""``pflpipe split SPEC [-o DIR] [--seed N] [--export FORMAT DIR]``: write and show a partition.

`pflpipe run` picks the written directory up when it is the default one (see
`pflpipe.stages.partition_data`); `--export` also writes it in another tool's layout.
"""

from pathlib import Path

from pflpipe.cli import seed_argument
from pflpipe.layout import CLIENTS, HEATMAP_PNG, MANIFEST_JSON

#: The table shows this many clients by default (first ones, then the last few).
DEFAULT_ROWS = 50


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "split", help="Partition the spec's dataset over clients; print a per-client table.",
        description="Run the partition_data stage alone: load the dataset, split it over the "
        "clients and into train/val/test, write the partition directory (per-client tensors, "
        f"{MANIFEST_JSON}, {HEATMAP_PNG}).")
    parser.add_argument("spec", type=Path, metavar="SPEC")
    parser.add_argument("-o", "--output", type=Path, metavar="DIR",
                        help="Partition directory (default <results_dir>/partition/seed-<seed>).")
    parser.add_argument("--seed", type=seed_argument,
                        help="Seed (default: the spec's first seed).")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, metavar="N",
                        help=f"Clients shown in the table (default {DEFAULT_ROWS}; 0 for all).")
    parser.add_argument("--export", nargs=2, metavar=("FORMAT", "DIR"),
                        help="Also write the partition for another tool: pfllib (PFLlib's "
                        "dataset folder), flower (a partition directory per client) or npz "
                        "(row indices, read back by the predefined partition). flower and "
                        "pfllib come with the reproduction package of the FedAvg warm start "
                        "(settings, model, initial weights; a runnable app for flower).")
    parser.add_argument("--force", action="store_true",
                        help="Write into -o DIR or the export DIR even when it holds files "
                        "split did not write there (another run's partition, your files, your "
                        "edits): the files it writes replace theirs by name; nothing else is "
                        "touched.")
    parser.set_defaults(handler=run)


def run(args) -> int:
    """Write the partition, print its table and, with --export, write it for another tool."""
    from pflpipe.cli import UsageError
    from pflpipe.data.export import FORMATS, export_partition
    from pflpipe.overwrite import claim_dir
    from pflpipe.spec import read_spec
    from pflpipe.stages import partition_data

    if args.export and args.export[0] not in FORMATS:
        raise UsageError(f"--export: unknown format {args.export[0]!r}; choose one of "
                         f"{', '.join(FORMATS)}")
    spec = read_spec(args.spec)
    seed = spec.experiment.seeds[0] if args.seed is None else args.seed
    out_dir = args.output or partition_data.default_dir(spec, seed)
    # the default directory is split's own; -o names one of the user's choice
    claim = claim_dir(out_dir, "pflpipe split", force=args.force or args.output is None)
    result = partition_data.run(spec, seed, out_dir)
    claim.record([MANIFEST_JSON, CLIENTS, HEATMAP_PNG])
    _print(result, args.rows)
    if args.export:
        fmt, target = args.export[0], Path(args.export[1])
        files = export_partition(out_dir, fmt, target, spec=spec, seed=seed, force=args.force)
        print(f"exported {len(files)} file(s) to {target}/ ({exported(fmt, result)})")
    return 0


def exported(fmt: str, result) -> str:
    """What an export holds (val files only when the partition has a validation split)."""
    from pflpipe import layout

    val = any(client.n_val for client in result.clients)
    package = (f"; {layout.REPRODUCE_JSON}, {layout.INITIAL_WEIGHTS_PT}, "
               "pflpipe_fedavg/model.py")
    readme = layout.README_MD
    data_only = ("; the data only: no reproduction package for a regression, which pflpipe "
                 "trains with the summed Gaussian NLL that neither the Flower app nor PFLlib's "
                 "main.py computes")
    return {
        "pfllib": "PFLlib layout: train/<k>.npz, test/<k>.npz" + (", val/<k>.npz" if val else "")
                  + f", {layout.PFLLIB_CONFIG_JSON}" + (
                      package + f", pfllib_run.py, {readme} (the main.py command)"
                      if result.n_classes else data_only),
        "flower": "Flower: partition_<k>/{" + ("train,val,test" if val else "train,test")
                  + f"}}.npz, {layout.FLOWER_PARTITIONS_JSON}" + (
                      package + f", the app (pflpipe_fedavg/, {layout.PYPROJECT_TOML}, {readme})"
                      if result.n_classes else data_only),
        "npz": "row indices; read back with partition: {strategy: predefined, path: "
               f"<DIR>/{layout.EXPORT_INDEX_NPZ}}}",
    }[fmt]


def _print(result, rows: int) -> None:
    from rich.console import Console
    from rich.table import Table

    from pflpipe.stages.partition_data import format_classes

    table = Table(title=f"{result.dataset}, {result.strategy}, seed {result.seed}: "
                        f"{len(result.clients)} clients")
    for column in ("client", "train", "val", "test", "total"):
        table.add_column(column, justify="right")
    table.add_column("classes")
    shown = result.clients
    if 0 < rows < len(shown):
        tail = min(5, rows // 2)
        shown = (*shown[:rows - tail], None, *shown[len(shown) - tail:])
    for client in shown:
        if client is None:
            table.add_row("…", "", "", "", "", f"{len(result.clients) - rows} clients not shown")
            continue
        table.add_row(str(client.client_id), str(client.n_train), str(client.n_val),
                      str(client.n_test), str(client.n), format_classes(client.classes))
    console = Console(soft_wrap=True)
    console.print(table)
    sizes = sorted(client.n for client in result.clients)
    console.print(f"client sizes: min {sizes[0]}, median {sizes[len(sizes) // 2]}, max "
                  f"{sizes[-1]}; {result.n_assigned:,} of {result.n_samples:,} samples assigned")
    console.print(f"content hash {result.content_hash}")
    # the stage has printed its warnings already (a note each): not twice
    console.print(f"wrote {result.out_dir}/ ({MANIFEST_JSON}, {CLIENTS}/, {HEATMAP_PNG})")
