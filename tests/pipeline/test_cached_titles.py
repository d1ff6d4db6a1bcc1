"""A rerun on the local runner names every cached task by its entry and seed (↺ lines)."""

from pflpipe.pipelines.local import run_local
from pflpipe.spec import parse_spec

SPEC = """\
experiment: {{name: cached, seeds: [0, 1], output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 3, classes_per_client: 4}}
federation: {{rounds: 1}}
personalization: [{{name: local, epochs: 1}}, {{name: fedper, rounds: 1}}]
tracking: {{enabled: false}}
"""


def test_a_rerun_names_each_cached_task_by_its_entry_and_seed(tmp_path):
    spec = parse_spec(SPEC.format(out=tmp_path))
    run_local(spec, {}, results_dir=tmp_path)

    again = run_local(spec, {}, results_dir=tmp_path)

    cached = sorted(t.title for t in again.tasks if t.status == "CACHED")
    assert cached == sorted(f"{stage} · seed {seed}" for seed in (0, 1) for stage in (
        "partition_data", "warm_start_fedavg", "personalize[fedper]", "train_local"))
