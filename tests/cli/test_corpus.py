"""The corpus of bad input: every malformed spec, data file, results table and argument.

Each case runs the real command line in-process and asserts the exit code (2 for bad input), the
message (what is named, what is wrong) and what must never show: a traceback, "unexpected", or
numpy's / torch's advice to load a file unsafely. The malformed specs are `test_validate.CORPUS`.
"""

import json
import os
import pickle
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from test_validate import BASE, CORPUS

from pflpipe.cli import main
from pflpipe.layout import WRITTEN_JSON

NEVER = ("Traceback", "unexpected", "weights_only", "allow_pickle", "unsafe", "trust the")


@dataclass(frozen=True)
class Case:
    """A command and the files it reads; `{tmp}` in args is the test's directory."""

    name: str
    args: tuple[str, ...]
    fragments: tuple[str, ...]
    files: Callable[[Path], None] = lambda tmp: None
    code: int = 2
    never: tuple[str, ...] = field(default=NEVER)
    #: Files or directories (`{tmp}` allowed) whose every byte must survive the command.
    kept: tuple[str, ...] = ()


def spec_case(name: str, text: str, fragments: list[str]) -> Case:
    return Case(f"spec-{name}", ("validate", "{tmp}/spec.yaml"), ("{tmp}/spec.yaml:", *fragments),
                lambda tmp: (tmp / "spec.yaml").write_text(text))


# ---- data files given to `pflpipe split` ---------------------------------------------------------

ARRAYS_SPEC = ("experiment: {{name: t, output_dir: {tmp}/out}}\ndataset: {{name: arrays, "
               "root: {tmp}, path: {file}}}\npartition: {{strategy: iid, n_clients: 3, "
               "min_samples: 5}}\n")
RNG = np.random.default_rng(0)
X, Y = RNG.normal(size=(30, 4)).astype(np.float32), np.arange(30) % 3


class Payload:
    """A pickled object inside a .pt file: loading it would call `open`."""

    def __reduce__(self):
        return (open, (os.devnull,))


def npz(**arrays) -> Callable[[Path], None]:
    return lambda tmp: np.savez(tmp / "d.npz", **arrays)


def raw(name: str, data: bytes | Callable[[], bytes]) -> Callable[[Path], None]:
    return lambda tmp: (tmp / name).write_bytes(data() if callable(data) else data)


def truncated(tmp: Path) -> None:
    np.savez(tmp / "full.npz", x=X, y=Y)
    data = (tmp / "full.npz").read_bytes()
    (tmp / "d.npz").write_bytes(data[:len(data) // 2])


def with_value(value: float, at: tuple[int, int]) -> np.ndarray:
    x = X.astype(np.float64)
    x[at] = value
    return x


def data_case(name: str, file: str, make: Callable[[Path], None], fragments: list[str]) -> Case:
    def files(tmp: Path) -> None:
        make(tmp)
        (tmp / "spec.yaml").write_text(ARRAYS_SPEC.format(tmp=tmp, file=file))

    return Case(f"data-{name}", ("split", "{tmp}/spec.yaml"), (f"{{tmp}}/{file}: ", *fragments),
                files)


DATA = [
    data_case("truncated-npz", "d.npz", truncated,
              ["not a readable .npz archive (a damaged or truncated zip archive)"]),
    data_case("random-npz", "d.npz", raw("d.npz", lambda: RNG.bytes(3000)),
              ["not a readable .npz archive (neither a zip archive nor an .npy header)"]),
    data_case("bare-npy", "d.npz", lambda tmp: np.save(tmp / "d.npy", X) or
              os.replace(tmp / "d.npy", tmp / "d.npz"), ["holds one bare array"]),
    data_case("object-array", "d.npz", npz(x=np.array([{"a": 1}] * 30, dtype=object), y=Y),
              ["array 'x' holds Python objects (dtype object)"]),
    data_case("pickled-object-pt", "d.pt", lambda tmp: torch.save({"x": Payload(), "y": Y},
                                                                   tmp / "d.pt"),
              ["holds a Python object (", "never unpickles objects"]),
    data_case("plain-pickle-pt", "d.pt", raw("d.pt", pickle.dumps({"x": X, "y": Y})),
              ["a plain Python pickle holding an object (numpy.", "not a torch.save file",
               "never unpickles objects"]),
    data_case("plain-pickle-of-payload-pt", "d.pt", raw("d.pt", pickle.dumps({"x": Payload()})),
              ["a plain Python pickle holding an object (io.open)"]),
    data_case("labels-are-ids", "d.npz", npz(x=X, y=np.where(Y == 2, 100_000, Y)),
              ["the largest label is 100,000, so 100,001 classes would be inferred, but only 3 "
               "distinct labels appear in 30 samples", "declare dataset.n_classes"]),
    data_case("random-pt", "d.pt", raw("d.pt", lambda: RNG.bytes(3000)),
              ["not a readable torch file (damaged, truncated or not written by torch.save)"]),
    data_case("list-pt", "d.pt", lambda tmp: torch.save([1, 2], tmp / "d.pt"),
              ["a .pt file must hold a dict of tensors x, y (got list)"]),
    data_case("string-samples", "d.npz", npz(x=np.array([["a", "b"]] * 30), y=Y),
              ["x has dtype <U1 (text); samples must be real numbers"]),
    data_case("complex-samples", "d.npz", npz(x=X.astype(np.complex64), y=Y),
              ["x has dtype complex64 (complex numbers)"]),
    data_case("0d-samples", "d.npz", npz(x=np.array(3.0), y=Y),
              ["x is a single value (a 0-d array); expected one row per sample"]),
    data_case("0d-labels", "d.npz", npz(x=X, y=np.array(1)),
              ["y must be a 1-D array of integer labels 0..n_classes-1 (got dtype int64, "
               "shape ()"]),
    data_case("5d-samples", "d.npz", npz(x=np.zeros((30, 1, 1, 1, 1)), y=Y),
              ["x has shape (30, 1, 1, 1, 1); expected [n, d] features"]),
    data_case("nan-features", "d.npz", npz(x=with_value(np.nan, (5, 1)), y=Y),
              ["x holds NaN or infinite values", "in 1 of 30 samples, first in sample 5"]),
    data_case("inf-features", "d.npz", npz(x=with_value(-np.inf, (7, 0)), y=Y),
              ["x holds NaN or infinite values", "first in sample 7"]),
    data_case("beyond-float32", "d.npz", npz(x=with_value(1e300, (2, 2)), y=Y),
              ["beyond float32's range", "first in sample 2"]),
    data_case("negative-labels", "d.npz", npz(x=X, y=Y - 1),
              ["y must be a 1-D array of integer labels", "smallest label -1"]),
    data_case("float-client-ids", "d.npz", npz(x=X, y=Y, client=np.arange(30) / 2),
              ["client must be a 1-D array of integer client ids (got dtype float64"]),
]


def unofficial_cifar(tmp: Path) -> None:
    folder = tmp / "cifar-10-batches-py"
    folder.mkdir()
    for name in [f"data_batch_{b}" for b in range(1, 6)] + ["test_batch", "batches.meta"]:
        (folder / name).write_bytes(pickle.dumps({"data": Payload(), "labels": [0]}))
    (tmp / "spec.yaml").write_text(f"experiment: {{name: t}}\ndataset: {{name: cifar10, root: "
                                   f"{tmp}}}\npartition: {{strategy: iid}}\n")


def cifar_archive_escaping_root(tmp: Path) -> None:
    (tmp / "root").mkdir()
    (tmp / "evil").write_text("x")
    with tarfile.open(tmp / "root" / "cifar-10-python.tar.gz", "w:gz") as archive:
        archive.add(tmp / "evil", arcname="../escaped")
    (tmp / "spec.yaml").write_text(f"experiment: {{name: t}}\ndataset: {{name: cifar10, root: "
                                   f"{tmp}/root, verify_checksums: false}}\npartition: "
                                   "{strategy: iid}\n")


def client_files(layout: str, make: Callable[[Path], None]) -> Callable[[Path], None]:
    def files(tmp: Path) -> None:
        make(tmp / "data")
        (tmp / "spec.yaml").write_text(
            f"experiment: {{name: t, output_dir: {tmp}/out}}\ndataset: {{name: client_files, "
            f"root: {tmp}, path: data, layout: {layout}}}\npartition: {{strategy: predefined}}\n")

    return files


def flower_truncated(data: Path) -> None:
    (data / "partition_0").mkdir(parents=True)
    np.savez(data / "partition_0" / "train.npz", x=X, y=Y)
    whole = (data / "partition_0" / "train.npz").read_bytes()
    (data / "partition_0" / "test.npz").write_bytes(whole[:len(whole) // 2])


def pfllib_random(data: Path) -> None:
    for split in ("train", "test"):
        (data / split).mkdir(parents=True)
        (data / split / "0.npz").write_bytes(RNG.bytes(500))


def leaf_nan(data: Path) -> None:
    for split in ("train", "test"):
        (data / split).mkdir(parents=True)
        rows = [[0.5, float("nan")] if split == "test" else [0.5, 1.0]] * 6
        (data / split / "u.json").write_text(json.dumps(
            {"users": ["u"], "user_data": {"u": {"x": rows, "y": [0, 1] * 3}}}))


def newcomer(change: Callable[[np.ndarray], np.ndarray], n: int = 20
             ) -> Callable[[Path], None]:
    """A digits partition, no checkpoints (the newcomer's data is checked first), new.npz."""
    def files(tmp: Path) -> None:
        from pflpipe.spec import parse_spec
        from pflpipe.stages import partition_data

        (tmp / "spec.yaml").write_text(BASE)
        partition_data.run(parse_spec(BASE), 0, tmp / "partition")
        (tmp / "checkpoints").mkdir()
        x = RNG.integers(0, 17, (n, 64)).astype(np.float64)   # digits' raw range, 0..16
        np.savez(tmp / "new.npz", x=change(x), y=np.arange(n) % 10)

    return files


def with_nan(x: np.ndarray) -> np.ndarray:
    x[3, 5] = np.nan
    return x


NEWCOMER_ARGS = ("personalize-new", "{tmp}/spec.yaml", "--client-data", "{tmp}/new.npz",
                 "--partition", "{tmp}/partition", "--checkpoints", "{tmp}/checkpoints")


DATA += [
    Case("data-client-files-flower-truncated", ("split", "{tmp}/spec.yaml"),
         ("{tmp}/data/partition_0/test.npz: not a readable .npz archive (a damaged or truncated",),
         client_files("flower", flower_truncated)),
    Case("data-client-files-pfllib-random", ("split", "{tmp}/spec.yaml"),
         ("{tmp}/data/train/0.npz: not a PFLlib client file (",),
         client_files("pfllib", pfllib_random)),
    Case("data-client-files-leaf-nan", ("split", "{tmp}/spec.yaml"),
         ("{tmp}/data: x holds NaN or infinite values", "in 6 of 12 samples, first in sample 6"),
         client_files("leaf", leaf_nan)),
    Case("data-newcomer-nan-features", NEWCOMER_ARGS,
         ("{tmp}/new.npz: x holds NaN or infinite values", "first in sample 3"),
         newcomer(with_nan)),
    Case("data-newcomer-divided-by-16", NEWCOMER_ARGS,
         ("{tmp}/new.npz: x lies in [0, 1] but the clients' training data in [0, 16]: the "
          "newcomer's features are on a smaller scale (divided by a constant?)",
          "Give x in the dataset's raw format"), newcomer(lambda x: x / 16)),
    Case("data-newcomer-times-16", NEWCOMER_ARGS,
         ("{tmp}/new.npz: x lies in [0, 256] but the clients' training data in [0, 16]: the "
          "newcomer's features are on a larger scale (multiplied by a constant?)",),
         newcomer(lambda x: x * 16)),
    Case("data-newcomer-one-sample", NEWCOMER_ARGS,
         ("{tmp}/new.npz: the newcomer has 1 sample(s); at least 3 are needed (one each for "
          "train, val and test", "give it more samples"),
         newcomer(lambda x: x, n=1), never=(*NEVER, "min_samples")),
    Case("data-unofficial-cifar-pickle", ("split", "{tmp}/spec.yaml"),
         ("{tmp}/cifar-10-batches-py/data_batch_1 is not the official file (md5",
          "expected c99cafc152244af753f735de768cd75f", "verify_checksums: false"),
         unofficial_cifar, never=NEVER[:3]),
    Case("data-cifar-archive-escaping-root", ("split", "{tmp}/spec.yaml"),
         ("cannot unpack the files found under {tmp}/root",), cifar_archive_escaping_root),
]

# ---- results tables given to `pflpipe report` ----------------------------------------------------

TABLES = [
    Case("table-mixing-units", ("report", "{tmp}/t.csv", "-o", "{tmp}/out"),
         ("{tmp}/t.csv:5: accuracy 0.8 looks like a fraction, but {tmp}/t.csv:2 has 75 (percent)",
          "the table mixes fractions and percentages", "--unit percent"),
         raw("t.csv", b"client,model,accuracy\n0,local,75\n0,fedavg,70\n0,x,80\n1,local,0.8\n"
                      b"1,fedavg,65\n1,x,75\n")),
    Case("table-percent-declared-fraction",
         ("report", "{tmp}/t.csv", "-o", "{tmp}/out", "--unit", "fraction"),
         ("{tmp}/t.csv:2: accuracy 75 is above 1; accuracies must be fractions in [0, 1]",),
         raw("t.csv", b"client,model,accuracy\n0,local,75\n0,fedavg,70\n0,x,80\n")),
    Case("table-regression-without-mse", ("report", "{tmp}/t.csv", "-o", "{tmp}/out"),
         ("{tmp}/t.csv:3: loss (the mean squared error of a regression) must be a finite number",),
         raw("t.csv", b"client,model,accuracy,loss\n0,local,,0.5\n0,fedavg,,-1\n")),
    Case("table-classification-declared-neg-mse",
         ("report", "{tmp}/t.csv", "-o", "{tmp}/out", "--unit", "neg_mse"),
         ("{tmp}/t.csv:2: accuracy 0.75: the table scores a classification, but --unit neg_mse "
          "reads the loss column as a regression's MSE", "drop --unit neg_mse"),
         raw("t.csv", b"client,model,accuracy,loss\n0,local,0.75,0.6\n0,fedavg,0.7,0.7\n"
                      b"0,x,0.8,0.5\n")),
    Case("table-not-utf8", ("report", "{tmp}/t.csv", "-o", "{tmp}/out"),
         ("{tmp}/t.csv: the results table is UTF-16 text; save it as UTF-8",),
         raw("t.csv", b"\xff\xfe\x00bad")),
]

# ---- arguments and paths -------------------------------------------------------------------------

ARGS = [
    Case("arg-seed-beyond-range", ("split", "{tmp}/spec.yaml", "--seed", str(2**32)),
         ("argument --seed: must be in 0..4294967295",),
         lambda tmp: (tmp / "spec.yaml").write_text(BASE)),
    Case("arg-negative-seed", ("personalize-new", "{tmp}/spec.yaml", "--client-data", "x.npz",
                               "--seed", "-3"),
         ("argument --seed: must be in 0..4294967295",),
         lambda tmp: (tmp / "spec.yaml").write_text(BASE)),
    Case("arg-unknown-verb", ("trian", "spec.yaml"), ("invalid choice: 'trian'",)),
    Case("path-spec-is-a-directory", ("validate", "{tmp}"),
         ("{tmp}: cannot read the spec (IsADirectoryError",)),
    Case("path-spec-is-endless", ("validate", "/dev/zero"),
         ("/dev/zero: the spec is larger than 100,000 bytes",)),
    Case("path-spec-not-utf8", ("validate", "{tmp}/spec.yaml"),
         ("{tmp}/spec.yaml: the spec is UTF-16 text; save it as UTF-8",),
         raw("spec.yaml", b"\xff\xfe\xfa")),
    Case("path-output-below-a-file",
         ("schema", "-o", "{tmp}/notes.txt/schema.json"),
         ("error: -o {tmp}/notes.txt/schema.json: {tmp}/notes.txt is a file, not a folder",),
         raw("notes.txt", b"mine"), kept=("{tmp}/notes.txt",)),
    Case("path-report-output-is-a-file",
         ("report", "{tmp}/t.csv", "-o", "{tmp}/t.csv"),
         ("error: -o {tmp}/t.csv: is a file, and -o names a directory; name a directory instead",),
         raw("t.csv", b"client,model,accuracy\n0,local,0.7\n0,fedavg,0.6\n0,x,0.8\n")),
    Case("arg-client-data-is-a-directory",
         ("personalize-new", "{tmp}/spec.yaml", "--client-data", "{tmp}"),
         ("--client-data: {tmp} is a directory; give the newcomer's data file",),
         lambda tmp: (tmp / "spec.yaml").write_text(BASE)),
    Case("arg-validate-set-bad-value", ("validate", "{tmp}/spec.yaml", "--set",
                                        "federation.lr=-1e-3"),
         ("(--set federation.lr=-0.001): federation.lr: must be greater than 0 (got -0.001)",),
         lambda tmp: (tmp / "spec.yaml").write_text(BASE)),
    Case("arg-run-tracking-scheme-unsupported",
         ("run", "{tmp}/spec.yaml", "--set", "tracking.uri=ftp://127.0.0.1/mlflow"),
         ("tracking.uri: unsupported scheme 'ftp'", "use one of sqlite, http, https"),
         lambda tmp: (tmp / "spec.yaml").write_text(BASE)),
    Case("arg-run-model-path-not-a-module",
         ("run", "{tmp}/spec.yaml", "--set", "model={architecture: custom, path: 'os:system'}"),
         ("{tmp}/spec.yaml: model.path: 'os:system' is a builtin_function_or_method, not a "
          "subclass of torch.nn.Module",),
         lambda tmp: (tmp / "spec.yaml").write_text(BASE.replace(
             "  name: t\n", f"  name: t\n  output_dir: {tmp}/out\n", 1)
             + "tracking: {enabled: false}\n")),
    Case("debug-after-the-verb", ("validate", "{tmp}/spec.yaml", "--debug"),
         ("Traceback", "SpecError", "partition.n_clients: must be a valid integer"),
         lambda tmp: (tmp / "spec.yaml").write_text(BASE.replace("10", "true")), never=()),
]

CASES = [*(spec_case(*case) for case in CORPUS), *DATA, *TABLES, *ARGS]


@pytest.mark.corpus
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_exits_with_its_code_and_a_clear_message(tmp_path, capsys, hostile, case):
    case.files(tmp_path)
    kept = [Path(path.replace("{tmp}", str(tmp_path))) for path in case.kept]
    before = [_contents(path) for path in kept]

    started = time.monotonic()
    code = _exit_code([arg.replace("{tmp}", str(tmp_path)) for arg in case.args])
    seconds = time.monotonic() - started

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=case.code, never=case.never,
            fragments=[fragment.replace("{tmp}", str(tmp_path)) for fragment in case.fragments],
            lost=[_contents(path) for path in kept] != before)


def _contents(path: Path) -> dict[str, bytes]:
    """Every file under `path` (or `path` itself) and its bytes."""
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return {str(file): file.read_bytes() for file in files if file.is_file()}


def _exit_code(args: list[str]) -> int:
    """main's return value, or the code argparse exits with."""
    try:
        return main(args)
    except SystemExit as exited:
        return exited.code


def test_corpus_holds_every_kind_of_bad_input():
    kinds = {case.name.split("-")[0] for case in CASES}
    assert kinds == {"spec", "data", "table", "arg", "path", "debug"}
    assert len(CASES) >= 57 + 60


def test_a_bug_exits_1_asking_for_a_report_with_debug(capsys):
    from pflpipe.cli import _report

    code = _report(ZeroDivisionError("division by zero"), debug=False)

    err = capsys.readouterr().err
    assert code == 1
    assert err == ("error: unexpected ZeroDivisionError: division by zero\nThis is a bug in "
                   "pflpipe; please report it, with the output of the same command run with "
                   "--debug (it shows the traceback).\n")


def test_debug_keeps_the_exit_code_of_a_stage_failure_class_of_error(capsys):
    from pflpipe.cli import _report
    from pflpipe.errors import DivergenceError, TrackingError

    assert _report(DivergenceError("client 3, round 2: loss became NaN"), debug=True) == 1
    assert _report(TrackingError("the MLflow tracking server ... does not answer"), True) == 1
    assert _report(PermissionError(13, "Permission denied", "/x"), debug=True) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: /x: Permission denied"


def test_a_full_disk_without_a_file_name_is_one_line_not_a_bug(capsys):
    import errno

    from pflpipe.cli import _report

    code = _report(OSError(errno.ENOSPC, "No space left on device"), debug=False)

    [line] = capsys.readouterr().err.splitlines()
    assert code == 1
    assert line.startswith("error: No space left on device (the writer named no file: check the "
                           "results directory, ")
    assert "bug" not in line


# ---- no overwrite (issue 30): no command writes into another run's or the user's files ----------
# (a block of its own: `pflpipe split -o` and `split --export` into occupied directories)

SPLIT_SPEC = ("experiment: {{name: t, output_dir: {tmp}/out}}\ndataset: {{name: digits}}\n"
              "partition: {{strategy: iid, n_clients: {clients}}}\ntracking: {{enabled: false}}\n")
RUN_PARTITION = "{tmp}/out/runs/20261126-120000-1a2b3c4d/seed-0/partition"


def finished_run_and_other_spec(tmp: Path) -> None:
    """A published run's 9-client partition, and a 6-client spec."""
    (tmp / "nine.yaml").write_text(SPLIT_SPEC.format(tmp=tmp, clients=9))
    (tmp / "spec.yaml").write_text(SPLIT_SPEC.format(tmp=tmp, clients=6))
    partition = Path(RUN_PARTITION.replace("{tmp}", str(tmp)))
    assert main(["split", str(tmp / "nine.yaml"), "-o", str(partition)]) == 0
    (partition / WRITTEN_JSON).unlink()   # the pipeline wrote it, not `pflpipe split`


def user_files_and_spec(tmp: Path) -> None:
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("mine")
    (tmp / "spec.yaml").write_text(SPLIT_SPEC.format(tmp=tmp, clients=6))


RUN = "{tmp}/out/runs/20261126-120000-1a2b3c4d"
TABLE = (b"client,model,accuracy\n0,local,0.7\n0,fedavg,0.6\n0,x,0.8\n1,local,0.5\n1,fedavg,0.6\n"
         b"1,x,0.7\n")


def finished_run_files(tmp: Path) -> None:
    """A published run's report and PersFL folder (as the pipeline writes them), a table, a spec."""
    run = Path(RUN.replace("{tmp}", str(tmp)))
    for folder, names in (("report", ("report.json", "report.md", "report.html")),
                          ("seed-0/persfl", ("grid.csv", "summary.md", "chosen.csv"))):
        (run / folder).mkdir(parents=True)
        for name in names:
            (run / folder / name).write_text(f"the run's {name}")
    (tmp / "t.csv").write_bytes(TABLE)
    (tmp / "spec.yaml").write_text(SPLIT_SPEC.format(tmp=tmp, clients=6))
    (tmp / "partition").mkdir()
    (tmp / "checkpoints").mkdir()
    np.savez(tmp / "new.npz", x=np.zeros((20, 64)), y=np.arange(20) % 10)


NEWCOMER = ("personalize-new", "{tmp}/spec.yaml", "--client-data", "{tmp}/new.npz", "--partition",
            "{tmp}/partition", "--checkpoints", "{tmp}/checkpoints", "-o")
OVERWRITE = [
    Case("path-overwrite-finished-run-partition",
         ("split", "{tmp}/spec.yaml", "-o", RUN_PARTITION),
         (f"{RUN_PARTITION} holds files of run '20261126-120000-1a2b3c4d' (clients, "
          "label_distribution.png, manifest.json) that `pflpipe split` did not write", "--force"),
         finished_run_and_other_spec, kept=(RUN_PARTITION,)),
    Case("path-overwrite-user-dir-split", ("split", "{tmp}/spec.yaml", "-o", "{tmp}/mine"),
         ("{tmp}/mine holds files (notes.txt) that `pflpipe split` did not write", "--force"),
         user_files_and_spec, kept=("{tmp}/mine",)),
    *(Case(f"path-overwrite-user-dir-export-{fmt}",
           ("split", "{tmp}/spec.yaml", "--export", fmt, "{tmp}/mine"),
           ("{tmp}/mine holds files (notes.txt) that `pflpipe split --export` did not write",
            "Choose another --export directory, or pass --force"), user_files_and_spec,
           kept=("{tmp}/mine",)) for fmt in ("flower", "pfllib")),
    Case("path-overwrite-finished-run-report", ("report", "{tmp}/t.csv", "-o", f"{RUN}/report"),
         (f"{RUN}/report holds files of run '20261126-120000-1a2b3c4d' (report.html, report.json, "
          "report.md) that `pflpipe report` did not write", "Choose another -o directory",
          "--force"), finished_run_files, kept=(f"{RUN}/report",)),
    Case("path-overwrite-user-dir-report", ("report", "{tmp}/t.csv", "-o", "{tmp}/mine"),
         ("{tmp}/mine holds files (notes.txt) that `pflpipe report` did not write", "--force"),
         lambda tmp: user_files_and_spec(tmp) or (tmp / "t.csv").write_bytes(TABLE),
         kept=("{tmp}/mine",)),
    Case("path-overwrite-finished-run-persfl", (*NEWCOMER, f"{RUN}/seed-0/persfl"),
         (f"{RUN}/seed-0/persfl holds files of run '20261126-120000-1a2b3c4d' (chosen.csv, "
          "grid.csv, summary.md) that `pflpipe personalize-new` did not write", "--force"),
         finished_run_files, kept=(f"{RUN}/seed-0/persfl",)),
    Case("path-overwrite-spec-with-compiled-pipeline",
         ("compile", "{tmp}/spec.yaml", "-o", "{tmp}/spec.yaml"),
         ("{tmp}/spec.yaml exists and `pflpipe compile` did not write it",
          "Choose another -o file, or pass --force to replace it"),
         user_files_and_spec, kept=("{tmp}/spec.yaml",)),
    Case("path-overwrite-user-file-schema", ("schema", "-o", "{tmp}/mine/notes.txt"),
         ("{tmp}/mine/notes.txt exists and `pflpipe schema` did not write it", "--force"),
         user_files_and_spec, kept=("{tmp}/mine",)),
    Case("path-compile-output-without-yaml", ("compile", "{tmp}/spec.yaml", "-o", "{tmp}/mine"),
         ("-o {tmp}/mine: KFP writes a pipeline to a .yaml (or .yml) file",
          "e.g. -o {tmp}/mine/t.yaml"), user_files_and_spec, kept=("{tmp}/mine",)),
]


@pytest.mark.corpus
@pytest.mark.parametrize("case", OVERWRITE, ids=[case.name for case in OVERWRITE])
def test_no_command_overwrites_another_runs_or_the_users_files(tmp_path, capsys, hostile, case):
    test_bad_input_exits_with_its_code_and_a_clear_message(tmp_path, capsys, hostile, case)
