"""The engine's compute counts equal what the trainers run."""

import pytest
import torch

from pflpipe.engine.accounting import Reads, scheduled_samples
from pflpipe.engine.data import SplitData
from pflpipe.engine.trainer import Job, index_table


@pytest.mark.parametrize("batch_size,batches_per_step", [(4, 1), (7, 2), (64, 1), (3, 3)])
def test_scheduled_samples_are_the_unpadded_entries_of_the_trainers_index_table(
        batch_size, batches_per_step):
    # Prepare: 6 clients of 0 to 23 samples, 0 to 9 steps each
    counts = [0, 1, 5, 8, 13, 23]
    data = SplitData.from_clients([torch.zeros(n, 1) for n in counts],
                                  [torch.zeros(n) for n in counts])
    steps = torch.tensor([3, 9, 2, 4, 0, 7])
    job = Job(state={}, train=(), objective=None, data=data, clients=torch.arange(6),
              steps=steps, lr={}, batch_size=batch_size, seeds=list(range(6)),
              batches_per_step=batches_per_step)

    # Execute: the samples the trainer's masks let through, and the engine's count
    table = index_table(job, torch.arange(6), int(steps.max()))
    ran = (table >= 0).flatten(1).sum(1)
    counted = scheduled_samples(torch.tensor(counts), steps * batches_per_step, batch_size)

    # Assert
    assert counted.tolist() == ran.tolist()


def test_reads_marks_the_groups_a_server_step_reads():
    reads = Reads({"model": {}, "control_delta": {}, "steps": {}})

    _ = reads["model"], reads.get("control_delta"), reads.get("absent")

    assert reads.read == {"model", "control_delta"}
    list(reads.items())
    assert reads.read == {"model", "control_delta", "steps"}
