"""The `sweep:` section: points and labels; each bad sweep an exit-2 error naming point, field."""

import json

import pytest

from pflpipe.cli import main
from pflpipe.pipelines.cache import scoped_spec_json
from pflpipe.spec import SpecError, parse_spec
from pflpipe.spec.sweep import MAX_POINTS, point_label, points

BASE = """\
experiment: {name: t, seeds: [0, 1]}
dataset: {name: digits}
partition: {strategy: ds2, n_clients: 4, alpha: 0.5}
federation: {rounds: 3}
personalization: [{name: fedper}, {name: ditto}]
"""


def sweep(text: str) -> str:
    return BASE + "sweep:\n" + text


def test_sweep_points_are_the_cartesian_product_last_key_fastest():
    spec = parse_spec(sweep("  partition.alpha: [0.1, 1.0]\n  federation.rounds: [2, 5]\n"))

    found = points(spec)

    assert [p.label for p in found] == ["alpha=0.1,rounds=2", "alpha=0.1,rounds=5",
                                        "alpha=1.0,rounds=2", "alpha=1.0,rounds=5"]
    assert [(p.spec.partition.alpha, p.spec.federation.rounds) for p in found] == [
        (0.1, 2), (0.1, 5), (1.0, 2), (1.0, 5)]
    assert all(p.spec.sweep is None for p in found)


def test_sweep_point_is_exactly_the_spec_written_with_its_values():
    spec = parse_spec(sweep("  personalization.ditto.lam: [0.5]\n"))
    alone = parse_spec(BASE.replace("{name: ditto}", "{name: ditto, lam: 0.5}"))

    (point,) = points(spec)

    assert point.spec == alone
    assert point.spec.content_hash() == alone.content_hash()


def test_sweep_section_value_replaces_the_section_when_it_names_another_strategy():
    spec = parse_spec(sweep("  partition: [{strategy: ds1, classes_per_client: 3}, "
                            "{strategy: ds2, alpha: 0.9}]\n"))

    first, second = points(spec)

    assert first.label == "partition=ds1(classes_per_client=3)"
    assert second.label == "partition=ds2(alpha=0.9)"
    assert first.spec.partition.strategy == "ds1" and first.spec.partition.classes_per_client == 3
    assert first.spec.partition.n_clients == 10   # replaced: ds1's own default, not the 4 above
    assert second.spec.partition.n_clients == 4   # merged into the ds2 section


def test_point_label_names_keys_by_whole_path_when_last_parts_collide():
    assert point_label({"federation.lr": 0.1, "personalization.ditto.lr": 0.2}) == \
        "federation.lr=0.1,personalization.ditto.lr=0.2"


def test_a_spec_without_a_sweep_dumps_and_hashes_as_before():
    spec = parse_spec(BASE)

    assert "sweep" not in json.loads(spec.model_dump_json())
    assert points(spec)[0].spec is spec


def test_sweeping_a_personalization_setting_leaves_the_shared_stages_inputs_unchanged():
    spec = parse_spec(sweep("  personalization.ditto.lam: [0.01, 1.0]\n"))
    first, second = (p.spec for p in points(spec))

    for stage in ("partition_data", "warm_start_fedavg", "train_local"):
        assert scoped_spec_json(first, stage) == scoped_spec_json(second, stage)
    assert scoped_spec_json(first, "personalize", "fedper") == \
        scoped_spec_json(second, "personalize", "fedper")
    assert scoped_spec_json(first, "personalize", "ditto") != \
        scoped_spec_json(second, "personalize", "ditto")


@pytest.mark.parametrize(("text", "expected"), [
    ("  partition.alpha: []\n",
     "<spec>:7: sweep.partition.alpha: the list of values is empty; give at least one value"),
    ("  partition.alpha: 0.3\n",
     "<spec>:7: sweep.partition.alpha: expected a list of values, e.g. [0.3] (got float 0.3)"),
    ("  partition.alpha: [0.5, -1]\n",
     "<spec>:7: sweep.partition.alpha: point alpha=-1: partition.alpha: must be greater than 0 "
     "(got -1)"),
    ("  federation.rounds: [1, many]\n",
     "<spec>:7: sweep.federation.rounds: point rounds=many: federation.rounds: must be a valid "
     "integer (got 'many')"),
    ("  partition.alpa: [0.5]\n",
     "<spec>:7: sweep.partition.alpa: point alpa=0.5: partition.alpa: unknown key; did you mean "
     "'alpha'?"),
    ("  federation.rounds.x: [1]\n",
     "<spec>:7: sweep.federation.rounds.x: point x=1: federation.rounds.x: federation.rounds is a "
     "single value (3), it has no 'x'"),
    ("  experiment.seeds: [[0], [1]]\n",
     "<spec>:7: sweep.experiment.seeds: a sweep may not change experiment.seeds"),
    ("  tracking.uri: ['sqlite:///a.db']\n",
     "<spec>:7: sweep.tracking.uri: a sweep may not change tracking"),
    ("  experiment: [{name: other}]\n",
     "<spec>:7: sweep.experiment: a sweep may not change experiment.name"),
    ("  personalization.ditto.warm_start: [2, 9]\n",
     "<spec>:7: sweep.personalization.ditto.warm_start: point warm_start=9: "
     "personalization[1].warm_start: round 9 of the FedAvg warm start does not exist"),
])
def test_bad_sweep_is_one_error_naming_the_point_and_the_field(text, expected):
    with pytest.raises(SpecError) as err:
        parse_spec(sweep(text))

    assert str(err.value).startswith(expected)


def test_too_many_points_names_the_bound_and_the_key_that_raises_it():
    values = ", ".join(str(0.01 * (i + 1)) for i in range(MAX_POINTS // 2 + 1))

    with pytest.raises(SpecError, match=rf"2 \(federation.rounds\) × {MAX_POINTS // 2 + 1} "
                       rf"\(federation.lr\) = {MAX_POINTS + 2} points; at most {MAX_POINTS} "
                       r"\(sweep.MAX_POINTS\). 'federation.lr' raises it most"):
        parse_spec(sweep(f"  federation.rounds: [2, 3]\n  federation.lr: [{values}]\n"))


def test_set_adds_a_sweep_key_and_a_whole_sweep(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(sweep("  partition.alpha: [0.1, 1.0]\n"))

    assert main(["validate", str(path), "--set", "sweep.federation.rounds=[2, 3]"]) == 0
    out = capsys.readouterr().out
    assert "sweep: 4 point(s) × 2 seed(s) = 8 runs" in out
    assert "    alpha=1.0,rounds=3\n" in out

    path.write_text(BASE)
    assert main(["validate", str(path), "--set", "sweep={federation.lr: [0.1, 0.2]}"]) == 0
    assert "    lr=0.1\n    lr=0.2\n" in capsys.readouterr().out


def test_validate_exits_2_on_a_bad_sweep_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(BASE)

    code = main(["validate", str(path), "--set", "sweep.experiment.seeds=[[3]]"])

    err = capsys.readouterr().err
    assert code == 2
    assert "sweep.experiment.seeds: a sweep may not change experiment.seeds" in err
    assert "Traceback" not in err
