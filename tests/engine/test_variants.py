"""Hyper-parameter variants as members (`pflpipe.engine.variants`): entries of one algorithm that
differ in its `member_params`, trained with every seed as members of one federation, leave every
file their own per-seed runs leave, byte for byte; what cannot vary per member is refused."""

import filecmp
from pathlib import Path

import pytest

from pflpipe.errors import DataError
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, personalize
from pflpipe.stages import warm_start_fedavg as warm_start

SEEDS = [0, 1]
SPEC = """\
experiment: {{name: variants, output_dir: {out}, seeds: [0, 1]}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 2}}
engine: {{compile: false}}
personalization:
  - {{name: ditto, label: ditto-a, rounds: 2, lam: 0.1, client_fraction: 0.5}}
  - {{name: ditto, label: ditto-b, rounds: 2, lam: 1.5, client_fraction: 0.5}}
  - {{name: pfedme, label: pfedme-a, rounds: 2, beta: 1.0}}
  - {{name: pfedme, label: pfedme-b, rounds: 2, beta: 0.7}}
  - {{name: fedprox, label: prox-a, rounds: 2, mu: 0.01, warm_start: none}}
  - {{name: fedprox, label: prox-b, rounds: 2, mu: 0.3}}
  - {{name: scaffold, label: scaffold-a, rounds: 2, server_lr: 1.0}}
  - {{name: scaffold, label: scaffold-b, rounds: 2, server_lr: 0.5}}
  - {{name: apfl, label: apfl-a, rounds: 2, alpha: 0.25}}
  - {{name: apfl, label: apfl-b, rounds: 2, alpha: 0.75}}
  - {{name: pfedme, label: pfedme-lam, rounds: 2, lam: 5.0}}
  - {{name: ditto, label: ditto-epochs, rounds: 2, personal_epochs: 2, client_fraction: 0.5}}
"""
VARIANTS = {"ditto": ["ditto-a", "ditto-b"], "pfedme": ["pfedme-a", "pfedme-b"],
            "fedprox": ["prox-a", "prox-b"], "scaffold": ["scaffold-a", "scaffold-b"],
            "apfl": ["apfl-a", "apfl-b"]}


def _files(root: Path) -> dict[Path, Path]:
    return {p.relative_to(root): p for p in sorted(root.rglob("*")) if p.is_file()}


def _assert_same_files(alone: Path, together: Path) -> None:
    a, b = _files(alone), _files(together)
    assert a and sorted(a) == sorted(b)
    different = [name for name in a if not filecmp.cmp(a[name], b[name], shallow=False)]
    assert not different, f"{together}: {different}"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    out = tmp_path_factory.mktemp("variants")
    spec = parse_spec(SPEC.format(out=out))
    parts = [out / f"partition{s}" for s in SEEDS]
    checkpoints = [out / f"checkpoints{s}" for s in SEEDS]
    for seed, part, ck in zip(SEEDS, parts, checkpoints, strict=True):
        partition_data.run(spec, seed, part)
        warm_start.run(spec, seed, part, ck, out / f"fedavg{seed}", resume="none")
    return out, spec, parts, checkpoints


@pytest.mark.parametrize("algorithm", sorted(VARIANTS))
def test_variants_as_members_write_every_file_of_their_own_runs_to_the_byte(setup, algorithm):
    # Prepare: every (entry, seed) alone
    out, spec, parts, checkpoints = setup
    labels = VARIANTS[algorithm]
    for label in labels:
        for seed, part, ck in zip(SEEDS, parts, checkpoints, strict=True):
            personalize.run(spec, seed, label, part, ck, out / f"alone/{label}{seed}",
                            resume="none")

    # Execute: both entries × both seeds as the members of one federation
    personalize.run_variants([(spec, label) for label in labels], SEEDS, parts, checkpoints,
                             [[out / f"members/{label}{s}" for s in SEEDS] for label in labels],
                             resume="none")

    # Assert: the same files, and the variants really differ from each other
    for label in labels:
        for seed in SEEDS:
            _assert_same_files(out / f"alone/{label}{seed}", out / f"members/{label}{seed}")
    first, second = (out / f"alone/{label}0/results.csv" for label in labels)
    assert first.read_text().replace(labels[0], "x") != second.read_text().replace(labels[1], "x")


@pytest.mark.parametrize(("labels", "match"), [
    (["pfedme-a", "pfedme-lam"], "PFedMe's runs differ in lam, which cannot differ"),
    (["ditto-a", "ditto-epochs"], "Ditto's runs differ in how they train"),
])
def test_variants_that_cannot_vary_per_member_are_refused_by_name(setup, labels, match):
    out, spec, parts, checkpoints = setup

    with pytest.raises(DataError, match=match):
        personalize.run_variants([(spec, label) for label in labels], SEEDS, parts,
                                 checkpoints, [[out / f"no/{label}{s}" for s in SEEDS]
                                               for label in labels], resume="none")


TUNED = """\
experiment: {{name: grid, output_dir: {out}, seeds: [0, 1]}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 2}}
engine: {{compile: false, seeds_as_members: true}}
personalization:
  - {{name: ditto, rounds: 2}}
tuning:
  seeds: [7]
  budget: {{rounds: 2}}
  entries:
    - entry: ditto
      grid: {{lam: [0.05, 0.5, 2.0]}}
"""


def test_tuning_grid_points_as_members_write_every_file_of_their_tune_point_tasks(tmp_path):
    # Prepare: the tuning seed's train_members task as the pipeline hands it its specs
    import json

    from pflpipe.pipelines.cache import tuning_members_specs_json
    from pflpipe.spec import Spec
    from pflpipe.stages import train_members, tune_point

    spec = parse_spec(TUNED.format(out=tmp_path))
    specs = {k: Spec.model_validate(v)
             for k, v in json.loads(tuning_members_specs_json(spec)).items()}
    points = [name for name in specs if name.startswith("tune_point")]

    # Execute: the members task, then each grid point's own tune_point task, resuming
    result = train_members.run(specs, tmp_path / "members")
    stores = tmp_path / "checkpoints"
    before = {p: p.stat().st_mtime_ns for p in stores.rglob("*") if p.is_file()}
    seed_dir = tmp_path / "members/seed-7"
    for i, name in enumerate(points):
        values = json.loads(name.split("] ", 1)[1])
        tune_point.run(specs[name], 7, "ditto", values, seed_dir / "partition",
                       seed_dir / "checkpoints", tmp_path / f"again/{i}")
    after = {p: p.stat().st_mtime_ns for p in stores.rglob("*") if p.is_file()}
    for i, name in enumerate(points):   # and alone, from scratch
        values = json.loads(name.split("] ", 1)[1])
        tune_point.run(specs[name], 7, "ditto", values, seed_dir / "partition",
                       seed_dir / "checkpoints", tmp_path / f"alone/{i}", resume="none")

    # Assert: one unit of the three points; nothing trained again; every file to the byte
    assert result.grouped == ["warm_start_fedavg", " + ".join(points)]
    assert after == before
    scores = set()
    members_points = sorted(seed_dir.glob("tune_point[[]ditto[]]-*"))
    assert len(members_points) == 3
    by_lam = {json.loads((d / "point.json").read_text())["values"]["lam"]: d
              for d in members_points}
    for i, name in enumerate(points):
        _assert_same_files(tmp_path / f"alone/{i}", tmp_path / f"again/{i}")
        _assert_same_files(tmp_path / f"alone/{i}",
                           by_lam[json.loads(name.split("] ", 1)[1])["lam"]])
        scores.add(json.loads((tmp_path / f"alone/{i}/point.json").read_text())["score"])
    assert len(scores) == 3   # the points differ


def test_validate_names_each_unit_of_variants_and_why_others_train_apart(tmp_path, capsys):
    # Prepare: the spec above with the switch on, as a file
    from pflpipe.cli import main

    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(out=tmp_path).replace(
        "engine: {compile: false}", "engine: {compile: false, seeds_as_members: true}"))

    # Execute
    code = main(["validate", str(path)])

    # Assert: variants joined in one unit; the entries that differ in more train apart, named
    out = capsys.readouterr().out
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("  train_members"))
    assert ("personalize[ditto-a] + personalize[ditto-b], personalize[pfedme-a] + "
            "personalize[pfedme-b], personalize[prox-a] + personalize[prox-b], "
            "personalize[scaffold-a] + personalize[scaffold-b], personalize[apfl-a] + "
            "personalize[apfl-b], personalize[pfedme-lam], personalize[ditto-epochs]: the 2 "
            "seeds") in line
    assert ("apart from personalize[pfedme-a] + personalize[pfedme-b]: personalize[pfedme-lam] "
            "(lam cannot differ between members of one batched run; pfedme takes per member: "
            "beta)") in out
    assert ("apart from personalize[ditto-a] + personalize[ditto-b]: personalize[ditto-epochs] "
            "(personal_epochs cannot differ") in out
