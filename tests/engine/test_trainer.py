"""The batched trainer equals the sequential reference; schedules and masks are exact."""

import pytest
import torch
from torch import nn

from pflpipe.engine.data import SplitData, member_seed, schedule, steps_for_epochs
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.trainer import BatchedTrainer, Context, Job, SequentialTrainer, index_table
from pflpipe.engine.tree import broadcast


def _objective(state, batch, shared, hp, ctx):
    return ctx.task_loss(state["model"], batch)


SGD = OptimizerConfig()


def _job(ds3, optimizer=SGD, steps=None, lr=None):
    _, s = ds3
    n = s.data.n_clients
    counts = s.data.train.counts
    return Job(state={"model": broadcast(s.init, n)}, train=("model",), objective=_objective,
               data=s.data.train, clients=torch.arange(n),
               steps=steps if steps is not None else steps_for_epochs(counts, 16, 2),
               lr={"model": lr if lr is not None else torch.full((n,), 0.05)}, batch_size=16,
               seeds=[member_seed(0, c) for c in range(n)], optimizer=optimizer)


def _max_diff(a, b):
    return max((a[g][k] - b[g][k]).abs().max().item() for g in a for k in a[g])


@pytest.mark.parametrize("optimizer", [
    OptimizerConfig(), OptimizerConfig(momentum=0.9, weight_decay=1e-3),
    OptimizerConfig(name="adam", weight_decay=1e-4)], ids=["sgd", "momentum", "adam"])
def test_batched_trainer_equals_sequential_for_unequal_clients(ds3, optimizer):
    job = _job(ds3, optimizer)
    ctx = ds3[1].ctx

    batched, sequential = BatchedTrainer(ctx).train(job), SequentialTrainer(ctx).train(job)

    assert len(set(job.steps.tolist())) > 3  # very unequal step counts
    assert _max_diff(batched.state, sequential.state) < (1e-4 if optimizer.name == "adam" else 1e-5)
    assert torch.allclose(batched.loss, sequential.loss, atol=1e-5)
    assert batched.bad_step.tolist() == [-1] * job.members


def test_batched_trainer_honours_per_client_lr_and_steps(ds3):
    n = ds3[1].data.n_clients
    steps = torch.tensor([0, 1, 7, 3, 12, 2, 5, 9, 4, 6])
    lr = torch.linspace(0.01, 0.2, n)
    job = _job(ds3, OptimizerConfig(momentum=0.5), steps=steps, lr=lr)
    ctx = ds3[1].ctx

    batched, sequential = BatchedTrainer(ctx).train(job), SequentialTrainer(ctx).train(job)

    assert _max_diff(batched.state, sequential.state) < 1e-5
    untouched = {k: v[0] for k, v in batched.state["model"].items()}
    assert all(torch.equal(untouched[k], ds3[1].init[k]) for k in untouched)  # 0 steps: unchanged


def test_batched_trainer_in_chunks_equals_one_pass(ds3):
    job = _job(ds3)
    ctx = ds3[1].ctx

    whole, chunked = BatchedTrainer(ctx).train(job), BatchedTrainer(ctx, max_members=3).train(job)

    # Bit for bit on CPU; cuBLAS picks its kernels by batch size, so on CUDA only within 1e-6.
    assert _max_diff(whole.state, chunked.state) <= (0.0 if ds3[1].device.type == "cpu" else 1e-6)


def test_schedule_covers_each_epoch_once_and_pads_the_last_batch():
    order = schedule(n=5, steps=6, batch_size=2, seed=1)

    assert order.shape == (6, 1, 2)
    epochs = order.view(2, 6)
    for epoch in epochs:
        assert sorted(i for i in epoch.tolist() if i >= 0) == [0, 1, 2, 3, 4]
        assert epoch[-1].item() == -1 and (epoch[:-1] >= 0).all()   # 3 batches: 2 + 2 + 1
    assert not torch.equal(epochs[0], epochs[1])                    # reshuffled
    assert torch.equal(order, schedule(n=5, steps=6, batch_size=2, seed=1))


def test_schedule_draws_one_permutation_per_epoch_from_the_members_seed():
    # Prepare: n = 5, B = 2: 3 batches an epoch (2 + 2 + 1); 4 steps of 2 batches = 8 batches,
    # i.e. 3 epochs, the last cut after 2 batches. The draws: torch.randperm from the seed.
    generator = torch.Generator().manual_seed(7)
    perms = [torch.randperm(5, generator=generator).tolist() for _ in range(3)]
    expected = [i for p in perms for i in p + [-1]][:16]

    # Execute
    order = schedule(n=5, steps=4, batch_size=2, seed=7, batches_per_step=2)

    # Assert
    assert order.shape == (4, 2, 2)
    assert order.flatten().tolist() == expected


def test_index_table_holds_each_members_schedule_in_the_trainers_order(ds3):
    # Prepare: unequal clients, 2 batches a step, members sorted by steps (most first)
    job = _job(ds3)
    job.batches_per_step = 2
    job.steps = (job.steps + 1) // 2
    order = torch.argsort(job.steps, descending=True, stable=True)
    counts = job.data.counts

    # Execute
    table = index_table(job, order, int(job.steps.max()))

    # Assert: row r is member order[r]'s schedule, -1 after its last step
    for row, m in enumerate(order.tolist()):
        steps = int(job.steps[m])
        assert torch.equal(table[row, :steps],
                           schedule(int(counts[m]), steps, 16, job.seeds[m], 2))
        assert (table[row, steps:] == -1).all()


def test_steps_for_epochs_counts_short_last_batches():
    # 10 samples in batches of 4 → 3 batches per epoch; 1 sample → 1; 8 → 2
    assert steps_for_epochs(torch.tensor([10, 1, 8]), 4, 2).tolist() == [6, 2, 4]
    assert steps_for_epochs(torch.tensor([10]), 4, 1, batches_per_step=2).tolist() == [2]


def test_masked_loss_equals_loss_over_real_samples():
    model = nn.Linear(3, 2)
    ctx = Context(model)
    params = dict(model.named_parameters())
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])
    padded = {"x": torch.cat([x, torch.randn(3, 3)]), "y": torch.cat([y, torch.zeros(3).long()]),
              "mask": torch.tensor([1.0] * 5 + [0.0] * 3)}

    masked = ctx.task_loss(params, padded)

    expected = nn.functional.cross_entropy(model(x), y)
    assert torch.allclose(masked, expected, atol=1e-7)


def test_batched_trainer_does_no_work_for_finished_members(ds3):
    """Work grows with real samples: every gathered batch belongs to a member still training."""
    seen = []

    class Recording(BatchedTrainer):
        def gather(self, job, local, clients):
            seen.append(local.shape[0])
            return super().gather(job, local, clients)

    steps = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    Recording(ds3[1].ctx).train(_job(ds3, steps=steps))

    # at step s the members with more than s steps are active: 10, 9, ..., 1
    assert seen == [10 - s for s in range(10)]
    assert sum(seen) == int(steps.sum())


def test_split_data_offsets_address_each_client():
    data = SplitData.from_clients([torch.zeros(2, 1), torch.ones(3, 1)],
                                  [torch.tensor([0, 1]), torch.tensor([1, 1, 0])])

    assert data.offsets.tolist() == [0, 2, 5]
    assert data.counts.tolist() == [2, 3]
    assert torch.equal(data.client(1)[1], torch.tensor([1, 1, 0]))
