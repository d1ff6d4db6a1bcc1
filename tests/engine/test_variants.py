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
  - {{name: pfedme, label: pfedme-lam, rounds: 2, lam: 5.0}}
  - {{name: ditto, label: ditto-epochs, rounds: 2, personal_epochs: 2, client_fraction: 0.5}}
"""
VARIANTS = {"ditto": ["ditto-a", "ditto-b"], "pfedme": ["pfedme-a", "pfedme-b"],
            "fedprox": ["prox-a", "prox-b"]}


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
