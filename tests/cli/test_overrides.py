"""`--set PATH=VALUE` and `pflpipe.load_spec(spec, **overrides)`, validated like the file."""

from pathlib import Path

import pytest
import yaml

import pflpipe
from pflpipe.cli import main
from pflpipe.errors import SpecError
from pflpipe.spec import read_spec

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "specs" / "persfl-digits.yaml"


def test_set_changes_a_setting_of_the_compiled_pipeline(tmp_path, capsys):
    out = tmp_path / "p.yaml"

    code = main(["compile", str(QUICKSTART), "-o", str(out), "--set", "federation.rounds=7",
                 "--set", "experiment.seeds=[0, 1]"])

    assert code == 0, capsys.readouterr().err
    ir = yaml.safe_load(out.read_text().split("\n---\n")[0])
    assert '"rounds":7' in out.read_text() and "seeds [0, 1]" in capsys.readouterr().out
    assert ir["pipelineInfo"]["name"] == "persfl-digits"


@pytest.mark.parametrize(("assignment", "message"), [
    ("federation.rounds=0", "persfl-digits.yaml (--set federation.rounds=0): federation.rounds: "
                            "must be greater than or equal to 1 (got 0)"),
    ("federation.roundz=3", "(--set federation.roundz=3): federation.roundz: unknown key; did you "
                            "mean 'rounds'?"),
    ("personalization.ditto.lam=0.2", "--set: personalization has no entry labelled or named "
                                      "'ditto'"),
    ("federation.rounds", "--set federation.rounds: expected PATH=VALUE"),
])
def test_a_bad_override_exits_2_naming_it_before_anything_runs(assignment, message, tmp_path,
                                                                capsys):
    code = main(["run", str(QUICKSTART), "--results", str(tmp_path), "--set", assignment])

    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_overrides_reach_list_entries_by_name_and_merge_sections():
    spec = pflpipe.load_spec(QUICKSTART, **{"personalization.fedper.rounds": 3},
                             federation={"lr": 0.1})

    assert spec.algorithm("fedper").rounds == 3
    assert spec.federation.lr == 0.1 and spec.federation.rounds == 40  # merged, not replaced
    assert pflpipe.load_spec(spec, federation={"rounds": 5}).federation.rounds == 5


def test_api_overrides_are_validated_like_the_file():
    with pytest.raises(SpecError, match=r"\(override federation=\{lr: -1\}\): federation.lr"):
        pflpipe.load_spec(QUICKSTART, federation={"lr": -1})


def test_the_api_compiles_a_spec(tmp_path):
    path = pflpipe.compile(read_spec(QUICKSTART), tmp_path / "p.yaml")
    assert path.read_text().startswith("# PIPELINE DEFINITION")


def test_a_mapping_naming_another_variant_replaces_the_section():
    spec = pflpipe.load_spec(QUICKSTART, partition={"strategy": "ds1", "classes_per_client": 4})

    assert spec.partition.strategy == "ds1" and spec.partition.classes_per_client == 4
    assert spec.partition.n_clients == 10  # the default again: the section was replaced


@pytest.mark.parametrize(("text", "value"), [("1e-3", 1e-3), ("2e-1", 0.2), ("1e6", 1e6),
                                             ("1.5E+2", 150.0)])
def test_set_reads_numbers_as_the_file_does(text, value, tmp_path):
    from pflpipe.spec.overrides import parse_assignments

    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(QUICKSTART.read_text().replace(
        "  lr: 0.3\n", f"  lr: 0.3\n  weight_decay: {text}\n", 1))

    from_set = read_spec(QUICKSTART, parse_assignments([f"federation.weight_decay={text}"]))

    assert from_set.federation.weight_decay == read_spec(spec_file).federation.weight_decay
    assert from_set.federation.weight_decay == value


def test_validate_takes_set_as_run_does(capsys):
    assert main(["validate", str(QUICKSTART), "--set", "federation.lr=1e-3", "--set",
                 "federation.rounds=7"]) == 0
    assert "7 rounds × 1 local epoch(s), sgd lr 0.001," in capsys.readouterr().out


def test_load_spec_takes_a_mapping_and_refuses_other_types():
    data = yaml.safe_load(QUICKSTART.read_text())

    spec = pflpipe.load_spec(data, federation={"lr": 1e-3})

    assert spec == read_spec(QUICKSTART, {"federation.lr": 1e-3})
    with pytest.raises(SpecError, match=r"^<dict>: partition.n_clients: must be a valid "
                                        "integer"):
        pflpipe.load_spec({**data, "partition": {**data["partition"], "n_clients": "ten"}})
    with pytest.raises(TypeError, match="load_spec takes a spec file's path, a mapping or a "
                                        "Spec, not a int"):
        pflpipe.load_spec(3)


def test_credentials_of_the_tracking_uri_are_not_compiled_into_the_pipeline(tmp_path, capsys,
                                                                            monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    out = tmp_path / "p.yaml"

    code = main(["compile", str(QUICKSTART), "-o", str(out), "--set",
                 "tracking.uri=http://alice:pw-7f3a9c@mlflow.example:5000"])

    assert code == 0, capsys.readouterr().err
    text = out.read_text()
    assert "pw-7f3a9c" not in text and "alice" not in text
    assert "http://mlflow.example:5000" in text
