"""`pflpipe validate`: every malformed spec gives exit 2, no traceback, the field and its line."""

import subprocess
import sys
from pathlib import Path

import pytest

from pflpipe.cli import main
from pflpipe.spec.loader import parse_yaml

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.yaml"))

BASE = """\
experiment:
  name: t
dataset:
  name: digits
partition:
  strategy: ds1
  n_clients: 10
"""

# A "billion laughs": 396 bytes, 9⁹ ≈ 4·10⁸ values once expanded.
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True))

# (id, spec text, substrings the message must contain); tests/cli/test_corpus.py runs each through
# `pflpipe validate` and asserts exit 2, "FILE:LINE: field: ..." and no traceback.
CORPUS = [
    ("empty-file", "", ["spec is empty"]),
    ("only-comments", "# nothing\n", ["spec is empty"]),
    ("list-document", "- a\n- b\n", ["must be a mapping", "list"]),
    ("scalar-document", "hello\n", ["must be a mapping"]),
    ("bad-yaml-indent", "experiment:\n  name: t\n dataset: x\n", ["invalid YAML"]),
    ("bad-yaml-unclosed", "experiment: {name: t\n", ["invalid YAML"]),
    ("tab-indent", "experiment:\n\tname: t\n", ["invalid YAML"]),
    ("duplicate-top-key", BASE + "partition:\n  strategy: iid\n", ["partition: duplicate key",
                                                                   "line 5"]),
    ("duplicate-nested-key", BASE.replace("  n_clients: 10\n", "  n_clients: 10\n  n_clients: 5\n"),
     ["partition.n_clients: duplicate key"]),
    ("missing-experiment", BASE.replace("experiment:\n  name: t\n", ""),
     ["experiment: required field missing"]),
    ("missing-name", BASE.replace("  name: t\n", "  seeds: [1]\n"),
     ["experiment.name: required field missing"]),
    ("missing-dataset-name", BASE.replace("  name: digits\n", "  root: data\n"),
     ["dataset.name: required field missing"]),
    ("unknown-dataset", BASE.replace("digits", "digitz"),
     ["dataset.name: unknown value 'digitz'", "did you mean 'digits'"]),
    ("unknown-top-key", BASE + "federaton:\n  rounds: 3\n",
     ["federaton: unknown key", "did you mean 'federation'"]),
    ("unknown-nested-key", BASE + "federation:\n  round: 3\n",
     ["federation.round: unknown key", "did you mean 'rounds'"]),
    ("unknown-deep-key", BASE + "  fractions:\n    training: 0.6\n",
     ["partition.fractions.training: unknown key", "did you mean 'train'"]),
    ("wrong-type-int", BASE + "federation:\n  rounds: many\n", ["federation.rounds", "integer"]),
    ("wrong-type-float", BASE + "federation:\n  lr: fast\n", ["federation.lr", "number"]),
    ("wrong-type-list", BASE.replace("  name: t\n", "  name: t\n  seeds: 3\n"),
     ["experiment.seeds", "list"]),
    ("wrong-type-section", BASE + "federation: 3\n", ["federation", "dictionary"]),
    ("negative-lr", BASE + "federation:\n  lr: -0.1\n", ["federation.lr", "greater than 0"]),
    ("zero-rounds", BASE + "federation:\n  rounds: 0\n", ["federation.rounds",
                                                          "greater than or equal to 1"]),
    ("client-fraction-above-one", BASE + "federation:\n  client_fraction: 1.5\n",
     ["federation.client_fraction"]),
    ("bad-experiment-name", BASE.replace("name: t\n", "name: My Experiment\n", 1),
     ["experiment.name", "lowercase"]),
    ("repeated-seed", BASE.replace("  name: t\n", "  name: t\n  seeds: [1, 1]\n"),
     ["experiment.seeds", "repeat"]),
    ("fractions-not-one", BASE + "  fractions: {train: 0.5, val: 0.2, test: 0.2}\n",
     ["partition.fractions", "sum to 1"]),
    ("negative-alpha", BASE.replace("strategy: ds1", "strategy: ds2") + "  alpha: -0.5\n",
     ["partition.alpha", "greater than 0", "-0.5"]),
    ("unknown-strategy", BASE.replace("ds1", "ds9"), ["partition.strategy", "'ds9'"]),
    ("param-of-other-strategy", BASE + "  alpha: 0.9\n",
     ["partition.alpha: unknown key"]),
    ("too-many-classes", BASE + "  classes_per_client: 11\n",
     ["partition.classes_per_client", "at most the 10 classes"]),
    ("n-clients-zero", BASE.replace("n_clients: 10", "n_clients: 0"), ["partition.n_clients"]),
    ("natural-without-groups", BASE.replace("ds1", "natural"),
     ["partition.strategy", "'natural' needs a dataset with client groups"]),
    ("unknown-algorithm", BASE + "personalization:\n  - name: dito\n",
     ["personalization[0].name", "did you mean 'ditto'"]),
    ("algorithm-wrong-param", BASE + "personalization:\n  - name: ditto\n    lamda: 0.1\n",
     ["personalization[0].lamda: not a parameter of 'ditto'", "did you mean 'lam'"]),
    ("algorithm-param-of-other", BASE + "personalization:\n  - name: fedper\n    lam: 0.1\n",
     ["personalization[0].lam: not a parameter of 'fedper'"]),
    ("algorithm-missing-name", BASE + "personalization:\n  - lam: 0.1\n",
     ["personalization[0].name: required field missing"]),
    ("algorithm-bad-value", BASE + "personalization:\n  - name: apfl\n    alpha: 2\n",
     ["personalization[0].alpha", "less than or equal to 1"]),
    ("pfedme-zero-steps", BASE + "personalization:\n  - name: pfedme\n    inner_steps: 0\n",
     ["personalization[0].inner_steps"]),
    ("per-fedavg-variant", BASE + "personalization:\n  - name: per_fedavg\n    variant: hf\n",
     ["personalization[0].variant", "first_order"]),
    ("duplicate-algorithm", BASE + "personalization:\n  - name: fedper\n  - name: fedper\n",
     ["personalization[1].label", "duplicates entry 0"]),
    ("lambda-above-one", BASE + "distillation:\n  lambdas: [0, 0.5, 1.5]\n",
     ["distillation.lambdas[2]", "less than or equal to 1"]),
    ("lambda-negative", BASE + "distillation:\n  lambdas: [-0.1]\n", ["distillation.lambdas[0]"]),
    ("temperature-zero", BASE + "distillation:\n  temperatures: [0, 5]\n",
     ["distillation.temperatures[0]", "greater than 0"]),
    ("temperature-negative", BASE + "distillation:\n  temperatures: [-1]\n",
     ["distillation.temperatures[0]"]),
    ("empty-grid", BASE + "distillation:\n  lambdas: []\n", ["distillation.lambdas"]),
    ("bad-objective", BASE + "distillation:\n  objective: mse\n",
     ["distillation.objective", "'kl' or 'ce'"]),
    ("bad-teacher", BASE + "distillation:\n  teacher: best\n", ["distillation.teacher"]),
    ("bad-metric", BASE + "evaluation:\n  metrics: [JI, Gini]\n", ["evaluation.metrics[1]"]),
    ("credential-in-storage",
     BASE + "storage:\n  kind: s3\n  bucket: exp\n  aws_secret_access_key: x\n",
     ["storage.aws_secret_access_key", "credentials are never read from the spec"]),
    ("bad-bucket", BASE + "storage:\n  kind: s3\n  bucket: Bad_Bucket\n", ["storage.bucket"]),
    ("bad-quantity", BASE + "resources:\n  default:\n    memory: lots\n",
     ["resources.default.memory", "Kubernetes quantity"]),
    ("unknown-stage", BASE + "resources:\n  personalise:\n    gpus: 1\n",
     ["resources.personalise: unknown key", "did you mean 'personalize'"]),
    ("bad-device", BASE + "engine:\n  device: tpu\n", ["engine.device"]),
    ("cnn-on-digits", BASE + "model:\n  architecture: cnn_cifar\n",
     ["model.architecture", "3×32×32"]),
    ("bad-custom-path", BASE + "model:\n  architecture: custom\n  path: not a path\n",
     ["model.path", "package.module:ClassName"]),
    ("adam-with-momentum", BASE + "federation:\n  optimizer: adam\n  momentum: 0.9\n",
     ["federation", "momentum applies to sgd only"]),
    ("s3-source-not-s3", BASE + "  source: http://x\n", ["partition.source: unknown key"]),
    ("dataset-source-not-s3",
     BASE.replace("  name: digits\n", "  name: digits\n  source: /tmp/x\n"),
     ["dataset.source", "s3://"]),
    ("ds4-odd-k", BASE.replace("ds1", "ds4") + "  k: 5\n", ["partition.k", "must be even"]),
    ("gaussian-sizes-reversed",
     BASE.replace("name: digits", "name: gaussian\n  n_min: 20\n  n_max: 10")
     .replace("ds1", "natural"), ["dataset", "n_min (20) must not exceed n_max (10)"]),
    ("more-clients-than-samples",
     BASE.replace("n_clients: 10", "n_clients: 1000\n  min_samples: 50"),
     ["partition.min_samples", "50,000 exceeds the 1,797 samples of 'digits' by 48,203"]),
    ("shared-cuts-uneven",
     BASE.replace("ds1", "label_skew").replace("n_clients: 10", "n_clients: 3")
     + "  shared_cuts: true\n", ["partition.shared_cuts", "not a multiple of the 10 classes"]),
    # issue 17: bounded loading
    ("billion-laughs", LAUGHS,
     [":5: the spec holds more than 50,000 values once its YAML aliases"]),
    ("recursive-alias", "experiment: &a {name: t, x: [*a]}\n",
     [":1: alias *a refers to a value that contains it (a recursive alias)"]),
    ("deep-nesting", "experiment: " + "[" * 2000 + "]" * 2000 + "\n",
     [":1: the spec nests more than 20 levels deep"]),
    ("deep-block-nesting", "".join(f"{'  ' * i}k{i}:\n" for i in range(25)) + "  " * 25 + "v\n",
     [":21: the spec nests more than 20 levels deep"]),
    ("too-large", BASE + "# " + "x" * 100_000 + "\n", ["larger than 100,000 bytes"]),
    ("python-tag", BASE + "federation: !!python/object/apply:os.system [echo hi]\n",
     [":8: federation: YAML tag tag:yaml.org,2002:python/object/apply:os.system is not allowed"]),
    ("python-scalar-tag", BASE + "federation: {lr: !!python/name:os.system ''}\n",
     [":8: invalid YAML: could not determine a constructor for the tag"]),
    # issue 17: strict types and bounds
    ("bool-as-int", BASE.replace("n_clients: 10", "n_clients: true"),
     [":7: partition.n_clients: must be a valid integer (got True); true/false is not a number"]),
    ("quoted-float", BASE + "federation:\n  lr: '0.05'\n",
     ["federation.lr: must be a valid number (got '0.05'); write the number without quotes"]),
    ("quoted-int", BASE.replace("n_clients: 10", "n_clients: '10'"),
     ["partition.n_clients: must be a valid integer (got '10'); write the number without quotes"]),
    ("float-as-int", BASE + "federation:\n  rounds: 2.5\n",
     ["federation.rounds: must be a valid integer (got 2.5); write a whole number"]),
    ("exponent-rounds", BASE + "federation:\n  rounds: 1e12\n",
     ["federation.rounds: must be a valid integer (got 1000000000000.0)"]),
    ("huge-rounds", BASE + "federation:\n  rounds: 1000000000000\n",
     ["federation.rounds: must be at most 100,000 (got 1,000,000,000,000)"]),
    ("huge-algorithm-rounds", BASE + "personalization:\n  - {name: ditto, rounds: 10000000}\n",
     ["personalization[0].rounds: must be at most 100,000"]),
    ("huge-epochs", BASE + "distillation:\n  epochs: 123456789\n",
     ["distillation.epochs: must be at most 100,000"]),
    ("infinite-lr", BASE + "personalization:\n  - {name: ditto, lr: .inf}\n",
     ["personalization[0].lr: must be a finite number"]),
    ("nan-lambda", BASE + "personalization:\n  - {name: ditto, lam: .nan}\n",
     ["personalization[0].lam: must be a finite number"]),
    # numbers YAML 1.1 (PyYAML) reads otherwise than YAML 1.2: an error, never a silent value
    ("yaml11-base-60", BASE + "federation:\n  rounds: 1:30\n",
     [":9: federation.rounds: 1:30 is 90 in YAML 1.1 (base 60) but text in YAML 1.2; write the "
      "number in plain digits (90), or quote it"]),
    ("yaml11-octal", BASE.replace("n_clients: 10", "n_clients: 010"),
     [":7: partition.n_clients: 010 is the octal number 8 in YAML 1.1 but 10 in YAML 1.2",
      "(8 or 10)"]),
    ("yaml11-underscores", BASE + "federation:\n  rounds: 1_000\n",
     [":9: federation.rounds: 1_000 is 1000 in YAML 1.1 but text in YAML 1.2", "(1000)"]),
    ("yaml11-binary", BASE + "federation:\n  rounds: 0b101\n",
     [":9: federation.rounds: 0b101 is the binary number 5 in YAML 1.1 but text in YAML 1.2"]),
    ("yaml12-octal", BASE + "federation:\n  rounds: 0o17\n",
     [":9: federation.rounds: 0o17 is text in YAML 1.1 but the number 15 in YAML 1.2", "(15)"]),
    ("yaml11-sexagesimal-float", BASE + "federation:\n  lr: 1:30.5\n",
     [":9: federation.lr: 1:30.5 is 90.5 in YAML 1.1 (base 60)"]),
    # one line per value of a union of scalars, not one per branch (`lam[0].bool`, `.int`, ...)
    ("union-compile-maybe", BASE + "engine: {compile: maybe}\n",
     [":8: engine.compile: must be 'auto', true or false (got 'maybe')"]),
    ("union-grid-nan", BASE + "personalization: [{name: ditto}]\ntuning: {seeds: [7], entries: "
     "[{entry: ditto, grid: {lam: [.nan, 1.0]}}]}\n",
     [":9: tuning.entries[0].grid.lam[0]: must be a finite number (got nan)"]),
    # a grid value is checked like its entry's own field, against the rest of the spec too
    ("grid-warm-start-beyond-rounds", BASE + "federation: {rounds: 3}\npersonalization: "
     "[{name: fedper}]\ntuning: {seeds: [7], entries: [{entry: fedper, grid: {warm_start: "
     "[1, 50]}}]}\n",
     [":10: tuning.entries[0].grid.warm_start[1]: round 50 of the FedAvg warm start does not "
      "exist: it runs federation.rounds = 3 rounds"]),
    ("grid-lr-beyond-bound", BASE + "personalization: [{name: ditto}]\ntuning: {seeds: [7], "
     "entries: [{entry: ditto, grid: {lr: [0.01, 1e6]}}]}\n",
     [":9: tuning.entries[0].grid.lr[1]: must be less than or equal to 100"]),
    ("entry-lr-beyond-bound", BASE + "personalization: [{name: ditto, lr: 1e6}]\n",
     [":8: personalization[0].lr: must be less than or equal to 100"]),
    ("string-name", BASE.replace("name: t\n", "name: 2024\n", 1),
     ["experiment.name: must be a valid string (got 2024)"]),
    ("seed-beyond-double", BASE.replace("  name: t\n", "  name: t\n  seeds: [9007199254740993]\n"),
     ["experiment.seeds: every seed must be in 0..4,294,967,295"]),
    ("seed-beyond-int64", BASE.replace("  name: t\n", f"  name: t\n  seeds: [{2**63}]\n"),
     ["experiment.seeds: every seed must be in 0..4,294,967,295"]),
    ("negative-seed", BASE.replace("  name: t\n", "  name: t\n  seeds: [-1]\n"),
     ["experiment.seeds: every seed must be in 0..4,294,967,295"]),
    ("too-many-seeds", BASE.replace("  name: t\n", f"  name: t\n  seeds: {list(range(1001))}\n"),
     ["experiment.seeds: must hold at most 1,000 entries (got 1,001 entries)"]),
    # issue 30: what the spec alone determines, in clear words
    ("no-seeds", BASE.replace("  name: t\n", "  name: t\n  seeds: []\n"),
     ["experiment.seeds: must hold at least 1 entry (got an empty list)"]),
    ("empty-section", BASE + "federation:\n",
     ["federation: is empty (the key has no value); remove the key to use the defaults"]),
    ("warm-start-past-rounds", BASE + "federation: {rounds: 3}\npersonalization:\n"
     "  - {name: fedper, warm_start: 50}\n",
     ["personalization[0].warm_start: round 50 of the FedAvg warm start does not exist: it runs "
      "federation.rounds = 3 rounds (checkpoints 0..3)"]),
    ("tracking-scheme", BASE + "tracking: {uri: 'ftp://127.0.0.1/x'}\n",
     ["tracking.uri: unsupported scheme 'ftp'", "use one of sqlite, http, https"]),
    ("custom-model-not-a-module", BASE + "model: {architecture: custom, path: "
     "'collections:OrderedDict'}\n",
     ["model.path: 'collections:OrderedDict' is the class OrderedDict, not a subclass of "
      "torch.nn.Module"]),
    ("custom-model-missing-module",
     BASE + "model: {architecture: custom, path: 'nosuch.mod:Net'}\n",
     ["model.path: cannot import module 'nosuch.mod'"]),
    ("custom-model-missing-class",
     BASE + "model: {architecture: custom, path: 'torch.nn:Nett'}\n",
     ["model.path: module 'torch.nn' has no 'Nett'"]),
    ("model-beyond-memory", BASE + "model: {architecture: mlp, hidden: [300000, 300000]}\n",
     ["model.hidden: the model has 90,022,800,010 parameters; 10 clients' copies",
      "GiB of memory"]),
    # issue 17: labels and baselines that fail only after training
    ("label-local", BASE + "personalization:\n  - {name: ditto, label: local}\n",
     ["personalization[0].label: 'local' names the results of the local-only baseline"]),
    ("label-fedavg", BASE + "personalization:\n  - {name: fedper, label: fedavg}\n",
     ["personalization[0].label: 'fedavg' names the results of the FedAvg warm start"]),
    ("label-persfl", BASE + "distillation: {objective: ce}\npersonalization:\n"
     "  - {name: apfl, label: persfl_gd}\n  - name: persfl\n",
     ["personalization[0].label: 'persfl_gd' names the results of the PersFL distillation"]),
    ("label-on-persfl", BASE + "personalization:\n  - {name: persfl, label: mine}\n",
     ["personalization[0].label: PersFL's results are named after distillation.objective "
      "('persfl'); remove the label"]),
    ("local-label-without-baseline", BASE + "personalization:\n  - {name: local, label: solo}\n"
     "  - name: fedper\n", ["evaluation.baselines.local: no stage of this spec produces a model "
                           "named 'local'; choose one of fedavg, solo, fedper"]),
    ("unknown-baseline", BASE + "evaluation:\n  baselines: {local: solo}\n",
     ["evaluation.baselines.local: no stage of this spec produces a model named 'solo'; choose "
      "one of fedavg, local, persfl"]),
    ("persfl-on-regression",
     BASE.replace("name: digits", "name: gaussian").replace("ds1", "natural")
     + "personalization:\n  - name: persfl\n",
     ["personalization[0].name: persfl distills class probabilities, but 'gaussian' is a "
      "regression"]),
]


def test_validate_corpus_is_large_enough():
    assert len(CORPUS) >= 30


def test_numbers_yaml_1_1_and_1_2_agree_on_are_read_as_numbers():
    data, _ = parse_yaml("a: .5e3\nb: 1e3\nc: 0x1F\nd: 07\ne: '1:30'\nf: 1.5\ng: -0\n")

    assert data == {"a": 500.0, "b": 1000.0, "c": 31, "d": 7, "e": "1:30", "f": 1.5, "g": 0}


def test_every_ambiguous_number_is_reported_at_once(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text("experiment: {name: t, seeds: [017]}\ndataset: {name: digits}\n"
                    "partition: {strategy: iid}\nfederation:\n  rounds: 1_000\n"
                    "  batch_size: 1:30\n")

    code = main(["validate", str(path)])

    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert [line.split(": ")[:2] for line in lines] == [
        [f"{path}:1", "experiment.seeds[0]"], [f"{path}:5", "federation.rounds"],
        [f"{path}:6", "federation.batch_size"]]


def test_set_with_an_ambiguous_number_names_the_assignment(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(BASE)

    code = main(["validate", str(path), "--set", "federation.rounds=0b11"])

    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "--set federation.rounds=0b11: 0b11 is the binary number 3 in YAML 1.1 but text in "
        "YAML 1.2; write the number in plain digits (3), or quote it if you mean text")


def test_validate_reports_every_problem_at_once(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(BASE + "  alpha: 1\nfederation:\n  lr: 0\n  rounds: -1\n")

    code = main(["validate", str(path)])

    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert [line.split(": ")[1] for line in lines] == [
        "partition.alpha", "federation.lr", "federation.rounds"]
    assert [int(line.split(":")[1]) for line in lines] == [8, 10, 11]


def test_validate_names_the_missing_file(tmp_path, capsys):
    code = main(["validate", str(tmp_path / "nope.yaml")])

    assert code == 2
    assert "nope.yaml: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("spec", SPECS, ids=[p.name for p in SPECS])
def test_every_shipped_spec_validates(spec, capsys):
    assert main(["validate", "--quiet", str(spec)]) == 0


@pytest.mark.parametrize(("partition", "expected"), [
    ("{strategy: predefined}",
     "predefined splits of every client from the dataset (used as given)"),
    ("{strategy: predefined, path: data/idx.npz, n_clients: 4, val_from_train: 0.25}",
     "predefined splits of 4 clients from data/idx.npz (used as given, 0.25 of train held out as "
     "val where none is given)"),
])
def test_validate_prints_the_plan_of_a_predefined_split(tmp_path, capsys, partition, expected):
    # Issue 27: the plan read partition.fractions, which a predefined split has not (exit 1).
    import numpy as np

    for k in range(4):   # four clients in the Flower layout; validate reads them as run does
        (tmp_path / "data" / f"partition_{k}").mkdir(parents=True)
        for split, n in (("train", 4), ("test", 2)):
            np.savez(tmp_path / "data" / f"partition_{k}" / f"{split}.npz",
                     x=np.full((n, 2), k, dtype=np.float32), y=np.arange(n) % 2)
    rows = {"train": (0, 4), "test": (4, 6)}
    np.savez(tmp_path / "data" / "idx.npz", **{f"{s}_{k}": np.arange(6 * k + a, 6 * k + b)
                                                for k in range(4) for s, (a, b) in rows.items()})
    path = tmp_path / "spec.yaml"
    path.write_text(f"experiment: {{name: t}}\ndataset: {{name: client_files, root: {tmp_path}, "
                    f"path: data, layout: flower}}\npartition: {partition}\n")

    code = main(["validate", str(path)])

    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"partition_data      client_files, {expected}" in captured.out


def test_validate_as_a_process_exits_2_without_traceback_and_skips_torch(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BASE + "federation:\n  lr: -1\n")
    probe = ("import sys; from pflpipe.cli import main; code = main(['validate', sys.argv[1]]); "
             "assert 'torch' not in sys.modules and 'kfp' not in sys.modules "
             "and 'mlflow' not in sys.modules, 'heavy import on the validate path'; sys.exit(code)")

    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True)

    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{path}:9: federation.lr: must be greater than 0 (got -1)" in proc.stderr


def test_minimal_spec_is_about_ten_lines(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(BASE + "personalization:\n  - name: persfl\n  - name: fedper\n")

    assert main(["validate", str(path)]) == 0
    assert len(path.read_text().splitlines()) <= 12
    out = capsys.readouterr().out
    assert "distill_grid_search 5 λ × 6 T" in out


def test_schema_is_json_schema_of_the_spec(capsys):
    import json

    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "pflpipe spec"
    assert set(schema["required"]) == {"experiment", "dataset", "partition"}
    assert "DittoParams" in schema["$defs"]


def test_spec_reference_in_docs_is_generated_from_the_models():
    from pflpipe.spec.reference import markdown_reference

    assert (REPO / "docs" / "spec-reference.md").read_text() == markdown_reference(), (
        "docs/spec-reference.md is stale: run `pflpipe schema --markdown > docs/spec-reference.md`")


def test_validate_into_a_closed_pipe_stops_quietly_with_sigpipes_code():
    """`pflpipe validate SPEC | head` where head left first: no 'unexpected BrokenPipeError'."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from pflpipe.cli import main; "
                             "sys.exit(main(sys.argv[1:]))", "validate",
                             str(REPO / "specs" / "persfl-digits.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()   # the reader is gone before the first line is written

    _, err = proc.communicate(timeout=120)

    assert (proc.returncode, err.decode()) == (141, "")


def _predefined(tmp_path, clients, partition="", dataset=""):
    """A spec over a 40-sample arrays file with the given index file's clients."""
    import json

    import numpy as np

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.integers(0, 256, (40, 1, 2, 2), dtype=np.uint8),
             y=np.arange(40) % 4)
    (tmp_path / "split.json").write_text(json.dumps({"clients": clients}))
    path = tmp_path / "spec.yaml"
    path.write_text(f"experiment: {{name: t}}\ndataset: {{name: arrays, root: {tmp_path}, path: "
                    f"d.npz{dataset}}}\npartition: {{strategy: predefined, path: split.json"
                    f"{partition}}}\n")
    return path


TEN = [{"train": [4 * k, 4 * k + 1], "test": [4 * k + 2]} for k in range(10)]


def test_validate_finds_a_predefined_files_client_count_as_run_does(tmp_path, capsys):
    # partition.n_clients 20 against a 10-client file: only split/run refused it
    path = _predefined(tmp_path, TEN, ", n_clients: 20")

    code = main(["validate", str(path)])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "defines 10 clients but partition.n_clients is 20; set n_clients: 10" in err


def test_validate_says_a_predefined_file_has_no_validation_rows(tmp_path, capsys):
    path = _predefined(tmp_path, TEN)

    assert main(["validate", str(path)]) == 0

    out = capsys.readouterr().out
    assert ("first seed: 10 clients (the file's; partition.n_clients omitted), 20 training "
            "rows; no validation rows") in out
    assert "warning: no validation split: best_val is each client's last round" in out
    assert "metrics chosen on best_val (no validation rows: the last round)" in out


def test_validate_refuses_validation_rows_for_only_some_clients(tmp_path, capsys):
    clients = [{**TEN[0], "val": [3]}, *TEN[1:]]

    assert main(["validate", str(_predefined(tmp_path, clients))]) == 2
    assert "clients [1, 2, 3, 4, 5] have no validation rows but others do" in \
        capsys.readouterr().err


def test_validate_prints_the_normalisation_with_the_datas_own_numbers(tmp_path, capsys):
    import numpy as np

    path = _predefined(tmp_path, TEN, ", n_clients: 10")
    x = np.load(tmp_path / "d.npz")["x"] / 255

    assert main(["validate", str(path)]) == 0

    # arrays of uint8 default to `standard` with the pooled samples' own mean and std
    out = capsys.readouterr().out
    assert "(the file's; partition.n_clients 10 agrees)" in out
    assert (f"normalisation: auto → standard (uint8 samples): (x / 255 − {x.mean():.4g}) / "
            f"{x.std():.4g}, the pooled samples' own mean and std") in out


def test_validate_prints_per_feature_statistics_of_the_training_rows(tmp_path, capsys):
    import numpy as np

    path = _predefined(tmp_path, TEN, dataset=", normalization: per_feature")
    x = np.load(tmp_path / "d.npz")["x"].reshape(40, 4) / 255
    train = x[[r for c in TEN for r in c["train"]]]

    assert main(["validate", str(path)]) == 0

    mean, std = train.mean(axis=0), train.std(axis=0) + 1e-3
    assert (f"normalisation: per_feature: (x / 255 − μ) / (σ + 0.001) per feature over 20 "
            f"training rows of every client (4 features; μ {mean.min():.4g} to "
            f"{mean.max():.4g}, σ + 0.001 {std.min():.4g} to {std.max():.4g})") \
        in capsys.readouterr().out


def test_validate_prints_the_published_normalisation_without_reading_the_data(tmp_path, capsys):
    path = tmp_path / "spec.yaml"   # no MNIST files under root: none is read
    path.write_text(f"experiment: {{name: t}}\ndataset: {{name: mnist, root: {tmp_path}}}\n"
                    "partition: {strategy: ds1, n_clients: 10}\n")

    assert main(["validate", str(path)]) == 0
    assert "normalisation: standard: (x / 255 − 0.1307) / 0.3081, published mean and std" in \
        capsys.readouterr().out
