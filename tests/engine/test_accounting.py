"""The engine's compute counts equal what the trainers run."""

import pytest
import torch

from pflpipe.engine.accounting import Reads, batch_samples, passes
from pflpipe.engine.data import SplitData
from pflpipe.engine.trainer import Context, Job, index_table, sub_batch


@pytest.mark.parametrize("batch_size,batches_per_step", [(4, 1), (7, 2), (64, 1), (3, 3)])
def test_batch_samples_are_the_unpadded_entries_of_the_trainers_index_table(
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
    counted = batch_samples(torch.tensor(counts), steps, batch_size, batches_per_step)

    # Assert: in all, and for each draw of a step
    assert counted.sum(1).tolist() == ran.tolist()
    assert counted.tolist() == (table >= 0).sum((1, 3)).tolist()


def _job(objective, batches_per_step):
    data = SplitData.from_clients([torch.ones(4, 1)], [torch.zeros(4)])
    return Job(state={"model": {"w": torch.zeros(1, 1)}}, train=("model",), objective=objective,
               data=data, clients=torch.zeros(1, dtype=torch.long), steps=torch.tensor([1]),
               lr={}, batch_size=2, seeds=[0], batches_per_step=batches_per_step)


def test_passes_are_counted_per_draw_from_the_losses_an_objective_takes():
    ctx = Context(torch.nn.Linear(1, 1), "regression")

    def objective(state, batch, shared, hp, ctx):   # draw 0 once, draw 2 twice, draws 0+1 once
        params = {"weight": state["model"]["w"].view(1, 1), "bias": torch.zeros(1)}
        first, third = sub_batch(batch, 0), sub_batch(batch, 2)
        both = {k: v[:2].flatten(0, 1) if k != "key" else v for k, v in batch.items()}
        return (ctx.task_loss(params, first) + 2 * ctx.task_loss(params, third)
                + ctx.task_loss(params, third) + ctx.task_loss(params, both))

    assert passes(ctx, _job(objective, 3)) == [[2, 1, 2]]


def test_passes_refuse_a_loss_over_no_draw():
    ctx = Context(torch.nn.Linear(1, 1), "regression")

    def objective(state, batch, shared, hp, ctx):   # draw 0's padding: no real sample
        params = {"weight": state["model"]["w"].view(1, 1), "bias": torch.zeros(1)}
        return ctx.task_loss(params, {k: v[0, 1:] if k != "key" else v for k, v in batch.items()})

    with pytest.raises(RuntimeError, match="no union of the step's mini-batches"):
        passes(ctx, _job(objective, 2))


def test_reads_marks_the_groups_a_server_step_reads():
    reads = Reads({"model": {}, "control_delta": {}, "steps": {}})

    _ = reads["model"], reads.get("control_delta"), reads.get("absent")

    assert reads.read == {"model", "control_delta"}
    list(reads.items())
    assert reads.read == {"model", "control_delta", "steps"}
