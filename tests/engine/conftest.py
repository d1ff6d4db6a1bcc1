"""Fixtures of the engine tests: a real digits ds3 partition (very unequal client sizes)."""

import pytest

from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data
from pflpipe.training import stage_setup

DS3 = """\
experiment: {name: engine-ds3}
dataset: {name: digits}
partition: {strategy: ds3, n_clients: 10, min_samples: 10}
federation: {rounds: 3, batch_size: 16, lr: 0.05}
"""


@pytest.fixture(scope="session")
def ds3(tmp_path_factory, test_device):
    """(spec, Setup) of a digits ds3 partition over 10 clients."""
    root = tmp_path_factory.mktemp("ds3")
    spec = parse_spec(DS3 + f"engine: {{device: {test_device}}}\n"
                      f"storage: {{kind: local, path: {root / 'store'}}}\n")
    partition_data.run(spec, 0, root / "partition")
    return spec, stage_setup.setup(spec, 0, root / "partition")
