"""PersFL: teacher selection, the distillation objectives and the batched λ/T grid."""

import math

import pytest
import torch

from pflpipe.distill import GridConfig, choose_rounds, distillation_loss, run_grid
from pflpipe.distill.objective import soft_loss
from pflpipe.engine.data import FederatedData, SplitData, member_seed, steps_for_epochs
from pflpipe.engine.trainer import BatchedTrainer, Job, SequentialTrainer
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, select_teachers
from pflpipe.training import stage_setup

SPEC = """\
experiment: {name: persfl-test}
dataset: {name: digits}
partition: {strategy: ds1, n_clients: 4, classes_per_client: 3}
engine: {device: cpu}
"""


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("persfl")
    spec = parse_spec(SPEC)
    partition_data.run(spec, 0, root / "partition")
    s = stage_setup.setup(spec, 0, root / "partition")
    torch.manual_seed(0)
    teachers = {k: v.unsqueeze(0).repeat(4, *[1] * v.dim()) + 0.05 * torch.randn(4, *v.shape)
                for k, v in s.init.items()}
    return s, teachers


def _config(**changes):
    base = dict(lambdas=(0.0, 0.5, 1.0), temperatures=(1.0, 5.0), epochs=2, batch_size=16,
                lr=0.1, seed=0)
    return GridConfig(**{**base, **changes})


def test_distillation_loss_matches_hand_computation():
    # student logits A = [2, 0], teacher O = [0, 1], y = 0, λ = 0.5, T = 2
    ce = math.log(1 + math.exp(-2))                                    # CE(y, σ(A))
    p = [1 / (1 + math.exp(0.5)), math.exp(0.5) / (1 + math.exp(0.5))]  # σ(O / T)
    q = [math.exp(1) / (1 + math.exp(1)), 1 / (1 + math.exp(1))]       # σ(A / T)
    kl = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))
    expected = 0.5 * ce + 0.5 * 2**2 * kl                               # = 0.609211…

    loss = distillation_loss(torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 1.0]]),
                             torch.tensor([0]), torch.ones(1), torch.tensor(0.5),
                             torch.tensor(2.0), "kl")

    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(0.609211, abs=1e-6)


def test_soft_cross_entropy_differs_from_kl_by_the_teacher_entropy_only():
    student, teacher = torch.randn(6, 5, requires_grad=True), torch.randn(6, 5)
    t = torch.tensor(3.0)

    kl, ce = soft_loss(student, teacher, t, "kl"), soft_loss(student, teacher, t, "ce")

    p = torch.softmax(teacher / t, -1)
    assert torch.allclose(ce - kl, -(p * p.log()).sum(-1), atol=1e-6)
    grad_kl = torch.autograd.grad(kl.sum(), student, retain_graph=True)[0]
    assert torch.allclose(grad_kl, torch.autograd.grad(ce.sum(), student)[0], atol=1e-6)


def test_t_squared_keeps_soft_gradient_scale_roughly_independent_of_t():
    torch.manual_seed(1)
    student, teacher = torch.randn(256, 10, requires_grad=True), torch.randn(256, 10)
    norms, raw = {}, {}
    for t in (5.0, 25.0):
        loss = distillation_loss(student, teacher, torch.zeros(256).long(), torch.ones(256),
                                 torch.tensor(1.0), torch.tensor(t))
        norms[t] = torch.autograd.grad(loss, student)[0].norm().item()
        raw[t] = norms[t] / t**2          # the same gradient without the T² factor

    assert 0.8 < norms[5.0] / norms[25.0] < 1.25
    assert raw[5.0] / raw[25.0] > 20       # without T² it would shrink ~T² times


def test_lambda_zero_student_is_plain_fine_tuning_on_hard_labels(digits):
    s, teachers = digits
    config = _config(lambdas=(0.0,), temperatures=(1.0, 25.0))

    grid = run_grid(s.ctx, BatchedTrainer(s.ctx), s.data, teachers, config)

    n = s.data.n_clients
    job = Job(state={"model": teachers}, train=("model",),
              objective=lambda st, b, sh, hp, ctx: ctx.task_loss(st["model"], b),
              data=s.data.train, clients=torch.arange(n),
              steps=steps_for_epochs(s.data.train.counts, 16, 2),
              lr={"model": torch.full((n,), 0.1)}, batch_size=16,
              seeds=[member_seed(0, config.stream, c) for c in range(n)])
    fine_tuned = SequentialTrainer(s.ctx).train(job).state["model"]
    for key in teachers:
        assert torch.allclose(grid.params[key], fine_tuned[key], atol=1e-5)
    both_t = [row for row in grid.grid if row["client"] == 0]
    assert both_t[0]["val_accuracy"] == both_t[1]["val_accuracy"]   # T is irrelevant at λ = 0


def test_grid_batched_equals_sequential(digits):
    s, teachers = digits

    batched = run_grid(s.ctx, BatchedTrainer(s.ctx), s.data, teachers, _config())
    sequential = run_grid(s.ctx, SequentialTrainer(s.ctx), s.data, teachers, _config())

    for key in teachers:
        assert torch.allclose(batched.params[key], sequential.params[key], atol=1e-5)
    assert [(c["lam"], c["temperature"]) for c in batched.chosen] == \
        [(c["lam"], c["temperature"]) for c in sequential.chosen]
    assert len(batched.grid) == 4 * 3 * 2


def test_grid_points_are_members_of_one_job_each_equal_to_its_point_alone(digits):
    # PersFL's (λ, T) grid points train as members of one batched job (run_grid); a point's
    # students end with the scores they have when that point is the whole grid, to the bit
    s, teachers = digits
    whole = run_grid(s.ctx, BatchedTrainer(s.ctx), s.data, teachers, _config())

    for lam, temperature in ((0.5, 5.0), (1.0, 1.0)):
        alone = run_grid(s.ctx, BatchedTrainer(s.ctx), s.data, teachers,
                         _config(lambdas=(lam,), temperatures=(temperature,)))

        assert alone.grid == [row for row in whole.grid if (row["lam"], row["temperature"])
                              == (lam, temperature)]


def test_choosing_lambda_and_t_never_reads_test_labels(digits):
    s, teachers = digits
    generator = torch.Generator().manual_seed(3)
    poisoned = FederatedData(s.data.train, s.data.val, SplitData(
        s.data.test.x, torch.randint(0, 10, s.data.test.y.shape, generator=generator),
        s.data.test.offsets))

    clean = run_grid(s.ctx, BatchedTrainer(s.ctx), s.data, teachers, _config())
    dirty = run_grid(s.ctx, BatchedTrainer(s.ctx), poisoned, teachers, _config())

    assert [(c["lam"], c["temperature"], c["val_accuracy"]) for c in clean.chosen] == \
        [(c["lam"], c["temperature"], c["val_accuracy"]) for c in dirty.chosen]
    assert [c["test_accuracy"] for c in clean.chosen] != [c["test_accuracy"] for c in dirty.chosen]


def test_choose_rounds_picks_lowest_validation_loss_earliest_on_ties():
    # rounds × clients; client 0: min 0.2 at rows 1 and 3 → 1; client 1: min at row 2;
    # client 2: all equal → row 0
    loss = torch.tensor([[0.9, 0.8, 0.5], [0.2, 0.7, 0.5], [0.4, 0.1, 0.5], [0.2, 0.3, 0.5]])
    accuracy = torch.tensor([[0.1, 0.2, 0.3], [0.9, 0.5, 0.3], [0.9, 0.4, 0.3], [0.7, 0.8, 0.3]])

    assert choose_rounds(loss, accuracy, "val_loss").tolist() == [1, 2, 0]
    assert choose_rounds(loss, accuracy, "val_accuracy").tolist() == [1, 3, 0]


def test_select_teachers_stage_skips_the_untrained_round_and_honours_last_round(tmp_path):
    rows = ["round,client,split,loss,accuracy,n_samples"]
    losses = {0: [0.1, 0.1], 1: [0.9, 0.5], 2: [0.3, 0.6], 3: [0.4, 0.2]}
    for r, values in losses.items():
        rows += [f"{r},{c},val,{v},0.5,10" for c, v in enumerate(values)]
        rows += [f"{r},{c},test,0.0,1.0,10" for c in range(2)]       # test never consulted
    (tmp_path / "round_metrics.csv").write_text("\n".join(rows) + "\n")
    spec = parse_spec(SPEC)

    optimal = select_teachers.run(spec, tmp_path, tmp_path / "optimal")
    last = select_teachers.run(spec.model_copy(update={"distillation": spec.distillation.model_copy(
        update={"teacher": "last_round"})}), tmp_path, tmp_path / "last")

    assert [t["round"] for t in optimal.teachers] == [2, 3]   # round 0 (0.1) is not a candidate
    assert [t["round"] for t in last.teachers] == [3, 3]
    assert (tmp_path / "optimal" / "teacher_rounds.png").stat().st_size > 1000
