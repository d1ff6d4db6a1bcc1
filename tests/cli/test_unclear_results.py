"""Issue 46's "unclear" items whose fix is a correct result, not an error: what is said beside
the result (the fairness caution's count, a seed's tune task, the split array natural ignores)
and what is accepted (MLflow's `databricks` URI)."""

import json

import numpy as np

from pflpipe import layout
from pflpipe.cli import main
from pflpipe.report.report_writer import build_report
from pflpipe.report.results_reader import read_table
from pflpipe.stages import tune

# x improves client 0 at seed 0 only: 1 improved client at one seed, 0 at the other (0.5 mean)
TWO_SEEDS = "seed,client,model,accuracy\n" + "".join(
    f"{seed},{client},{model},{acc}\n" for seed in (0, 1) for client in range(3)
    for model, acc in (("local", 0.5), ("fedavg", 0.6),
                       ("x", 0.8 if (seed, client) == (0, 0) else 0.5)))


def test_the_fairness_caution_says_a_mean_over_seeds_is_one(tmp_path):
    (tmp_path / "t.csv").write_text(TWO_SEEDS)
    answers = build_report(read_table([tmp_path / "t.csv"])).answers()

    assert ("the fairness verdict rests on 0.5 improved clients, on average over 2 seeds, of 3 "
            "(x's U⁺)") in answers
    assert "0.5 improved client(s)" not in answers


def test_a_seeds_tune_task_is_named_by_its_seed_and_the_tune_over_seeds_is_not(tmp_path):
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        (tmp_path / name).mkdir()
        (tmp_path / name / layout.POINT_JSON).write_text(json.dumps(
            {"entry": "prox", "seed": seed, "values": {"lr": 0.1}, "score": 0.5}))
    (tmp_path / "chosen").mkdir()
    (tmp_path / "chosen" / layout.TUNING_JSON).write_text("{}")

    assert tune.seed_of([tmp_path / "a", tmp_path / "b"]) == 7
    assert tune.seed_of([tmp_path / "a", tmp_path / "c"]) is None       # two seeds
    assert tune.seed_of([tmp_path / "chosen"]) is None                   # the seeds' tunes
    assert tune.seed_of([tmp_path / "missing"]) is None                  # run() reports it


def test_validate_accepts_mlflows_databricks_uri(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("experiment: {name: t}\ndataset: {name: digits}\n"
                    "partition: {strategy: iid, n_clients: 3}\ntracking: {uri: databricks}\n")

    assert main(["validate", str(spec)]) == 0


def test_validate_warns_that_natural_does_not_read_the_files_split_array(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(60, 4)).astype(np.float32),
             y=np.arange(60) % 3, client=np.arange(60) % 3,
             split=np.array(["train", "val", "test"])[np.arange(60) // 3 % 3])
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"experiment: {{name: t, output_dir: {tmp_path / 'out'}}}\n"
                    f"dataset: {{name: arrays, root: {tmp_path}, path: d.npz}}\n"
                    "partition: {strategy: natural, n_clients: 3, min_samples: 5}\n")

    assert main(["validate", str(spec)]) == 0

    assert ("warning: the data file's 'split' array is not read: partition.strategy natural "
            "splits each client's rows by partition.fractions; to keep the file's "
            "train/val/test rows, use partition: {strategy: predefined}") in capsys.readouterr().out
