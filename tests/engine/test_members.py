"""Seeds as members (`pflpipe.engine.members`): a stage's seeds trained as one federation leave
every file a per-seed run leaves, byte for byte; what cannot be grouped is refused by name."""

import filecmp
import json
from pathlib import Path

import pytest

from pflpipe.errors import DataError
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, personalize, train_local, train_members
from pflpipe.stages import warm_start_fedavg as warm_start

SEEDS = [0, 1]
SPEC = """\
experiment: {{name: members, output_dir: {out}, seeds: [0, 1]}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 2{federation}}}
engine: {{compile: false}}
personalization:
  - {{name: local, epochs: 2}}
  - {{name: pfedme, rounds: 2}}
  - {{name: scaffold, rounds: 2}}
  - {{name: per_fedavg, rounds: 2}}
  - {{name: fedper, rounds: 2}}
  - {{name: ditto, rounds: 2, client_fraction: 0.5}}
"""


def _spec(out: Path, federation: str = ""):
    return parse_spec(SPEC.format(out=out, federation=federation))


def _files(root: Path) -> dict[Path, Path]:
    return {p.relative_to(root): p for p in sorted(root.rglob("*")) if p.is_file()}


def _assert_same_files(alone: Path, together: Path) -> None:
    a, b = _files(alone), _files(together)
    assert sorted(a) == sorted(b)
    different = [name for name in a if not filecmp.cmp(a[name], b[name], shallow=False)]
    assert not different, f"{together}: {different}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every seed's warm start and entries run alone, then as members, into separate folders."""
    out = tmp_path_factory.mktemp("members")
    spec = _spec(out)
    parts = [out / f"partition{s}" for s in SEEDS]
    for seed, part in zip(SEEDS, parts, strict=True):
        partition_data.run(spec, seed, part)
    for seed, part in zip(SEEDS, parts, strict=True):
        warm_start.run(spec, seed, part, out / f"alone/checkpoints{seed}",
                       out / f"alone/fedavg{seed}", resume="none")
    warm_start.run_members(spec, SEEDS, parts, [out / f"members/checkpoints{s}" for s in SEEDS],
                           [out / f"members/fedavg{s}" for s in SEEDS], resume="none")
    checkpoints = [out / f"alone/checkpoints{s}" for s in SEEDS]
    labels = [e.display_name for e in spec.personalization if e.name != "local"]
    for label in labels:
        for seed, part, ck in zip(SEEDS, parts, checkpoints, strict=True):
            personalize.run(spec, seed, label, part, ck, out / f"alone/{label}{seed}",
                            resume="none")
        personalize.run_members(spec, SEEDS, label, parts, checkpoints,
                                [out / f"members/{label}{s}" for s in SEEDS], resume="none")
    for seed, part in zip(SEEDS, parts, strict=True):
        train_local.run(spec, seed, part, out / f"alone/local{seed}", resume="none")
    train_local.run_members(spec, SEEDS, parts, [out / f"members/local{s}" for s in SEEDS],
                            resume="none")
    return out, spec, parts, ["fedavg", "checkpoints", "local", *labels]


@pytest.mark.parametrize("name", ["fedavg", "checkpoints", "local", "pfedme", "scaffold",
                                  "per_fedavg", "fedper", "ditto"])
def test_members_write_every_file_of_a_per_seed_run_to_the_byte(runs, name):
    # every round's global model, results.csv, history.csv, client models, summary.md
    out, *_ = runs
    for seed in SEEDS:
        _assert_same_files(out / f"alone/{name}{seed}", out / f"members/{name}{seed}")


def test_members_leave_each_seed_a_finished_checkpoint_its_own_run_reuses(runs):
    # Prepare: the members runs above left each seed's checkpoints last
    out, spec, parts, _ = runs
    stores = out / "checkpoints"
    before = {p: p.stat().st_mtime_ns for p in stores.rglob("*") if p.is_file()}

    # Execute: a per-seed run of seed 1, resuming
    personalize.run(spec, 1, "ditto", parts[1], out / "alone/checkpoints1",
                    out / "again/ditto1")

    # Assert: no checkpoint written (nothing trained), the same files as its own run
    assert {p: p.stat().st_mtime_ns for p in stores.rglob("*") if p.is_file()} == before
    _assert_same_files(out / "alone/ditto1", out / "again/ditto1")


def test_members_refuse_seeds_with_unequal_client_counts(tmp_path):
    spec = _spec(tmp_path)
    parts = []
    for seed, clients in ((0, 4), (1, 5)):
        varied = parse_spec(SPEC.format(out=tmp_path, federation="").replace(
            "n_clients: 4", f"n_clients: {clients}"))
        parts.append(tmp_path / f"partition{seed}")
        partition_data.run(varied, seed, parts[-1])

    with pytest.raises(DataError, match="different client counts \\(seed 0: 4, seed 1: 5\\)"):
        warm_start.run_members(spec, [0, 1], parts, [tmp_path / "c0", tmp_path / "c1"],
                               [tmp_path / "r0", tmp_path / "r1"])


def test_members_refuse_early_stopping_by_name(tmp_path):
    spec = _spec(tmp_path, ", early_stop: {patience: 2}")
    parts = [tmp_path / f"partition{s}" for s in (0, 1)]
    for seed, part in zip((0, 1), parts, strict=True):
        partition_data.run(spec, seed, part)

    with pytest.raises(DataError, match="federation.early_stop"):
        warm_start.run_members(spec, [0, 1], parts, [tmp_path / "c0", tmp_path / "c1"],
                               [tmp_path / "r0", tmp_path / "r1"])


def test_groups_name_what_trains_per_seed_and_why(tmp_path):
    spec = parse_spec(SPEC.format(out=tmp_path, federation=", early_stop: {patience: 2}")
                      + "  - {name: flow, rounds: 2}\n  - {name: persfl}\n")

    grouped, per_seed = train_members.groups(spec)

    # the entries start from the warm start, which early stopping keeps per seed
    assert grouped == ["train_local"]
    after_warm_start = "it starts from the warm start, which trains per seed"
    assert per_seed == {
        "warm_start_fedavg": "federation.early_stop: each seed stops on its own",
        "personalize[flow]": "flow builds networks of its own",
        **{f"personalize[{name}]": after_warm_start
           for name in ("pfedme", "scaffold", "per_fedavg", "fedper", "ditto")},
        "select_teachers, distill_grid_search": after_warm_start}


def test_members_stage_groups_what_the_pipeline_hands_it(tmp_path):
    # the scoped specs the pipeline hands train_members (pflpipe.pipelines.cache)
    from pflpipe.pipelines.cache import members_specs_json
    from pflpipe.spec import Spec

    text = SPEC.format(out=tmp_path, federation="")
    spec = parse_spec(text[:text.index("  - {name: pfedme")] + "  - {name: fedper}\n")
    specs = {k: Spec.model_validate(v) for k, v in json.loads(members_specs_json(spec)).items()}

    result = train_members.run(specs, tmp_path / "members")

    assert result.grouped == ["warm_start_fedavg", "train_local", "personalize[fedper]"]
    assert result.per_seed == {}
    stores = tmp_path / "checkpoints"
    before = {p: p.stat().st_mtime_ns for p in stores.rglob("*") if p.is_file()}
    for seed in (0, 1):   # each seed's own run finds its checkpoints finished: the same files
        part = tmp_path / f"members/seed-{seed}/partition"
        personalize.run(spec, seed, "fedper", part, tmp_path / f"members/seed-{seed}/checkpoints",
                        tmp_path / f"alone/fedper{seed}")
        _assert_same_files(tmp_path / f"members/seed-{seed}/personalize[fedper]",
                           tmp_path / f"alone/fedper{seed}")
    assert {p: p.stat().st_mtime_ns for p in stores.rglob("*") if p.is_file()} == before
