"""engine.precision: the spec field, bfloat16 forward passes with float32 training state."""

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call

from pflpipe.engine import precision
from pflpipe.engine.data import member_seed
from pflpipe.engine.trainer import BatchedTrainer, Context, Job, SequentialTrainer
from pflpipe.engine.tree import broadcast
from pflpipe.spec import SpecError, parse_spec
from pflpipe.training import stage_setup

SPEC = """\
experiment: {name: precision-spec}
dataset: {name: digits}
partition: {strategy: iid, n_clients: 3}
engine: {device: cpu, precision: PRECISION}
"""


def test_engine_precision_is_fp32_tf32_or_bf16_and_names_the_field():
    assert parse_spec(SPEC.replace(", precision: PRECISION", "")).engine.precision == "fp32"
    assert parse_spec(SPEC.replace("PRECISION", "bf16")).engine.precision == "bf16"

    with pytest.raises(SpecError, match="engine.precision"):
        parse_spec(SPEC.replace("PRECISION", "fp16"))


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def test_bf16_forward_runs_the_network_in_bfloat16_and_returns_float32():
    model = _model()
    params = dict(model.named_parameters())
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))

    out = Context(model, precision="bf16").forward(params, x)

    by_hand = functional_call(model, {k: v.bfloat16() for k, v in params.items()},
                              (x.bfloat16(),))
    assert out.dtype == torch.float32
    assert torch.equal(out, by_hand.float())
    assert not torch.equal(out, Context(model).forward(params, x))   # fp32 rounds otherwise


def _job(ds3, steps):
    _, s = ds3
    n = s.data.n_clients
    return Job(state={"model": broadcast(s.init, n)}, train=("model",),
               objective=lambda st, batch, sh, hp, ctx: ctx.task_loss(st["model"], batch),
               data=s.data.train, clients=torch.arange(n), steps=steps,
               lr={"model": torch.full((n,), 0.05)}, batch_size=16,
               seeds=[member_seed(0, c) for c in range(n)])


def test_bf16_training_batched_equals_sequential_and_keeps_float32_state(ds3):
    _, s = ds3
    job = _job(ds3, torch.tensor([6, 1, 3, 2, 0, 5, 4, 3, 1, 2]))
    bf16 = Context(s.ctx.model, s.ctx.task, precision="bf16")

    batched = BatchedTrainer(bf16).train(job)
    sequential = SequentialTrainer(bf16).train(job)
    fp32 = BatchedTrainer(Context(s.ctx.model, s.ctx.task)).train(job)

    assert all(v.dtype == torch.float32 for v in batched.state["model"].values())
    diff = max((batched.state["model"][k] - sequential.state["model"][k]).abs().max().item()
               for k in s.init)
    to_fp32 = max((batched.state["model"][k] - fp32.state["model"][k]).abs().max().item()
                  for k in s.init)
    assert 1e-5 < to_fp32 < 1e-2       # bfloat16 rounds: close to, not equal to, float32
    # a batched product sums in another order than a member's own: the two differ by bfloat16's
    # rounding (an ulp of 2^-8), as much as bfloat16 differs from float32, and no more
    assert diff < 1e-2
    assert torch.allclose(batched.loss, sequential.loss, rtol=1e-2)


def test_precision_sets_cuda_tf32_only_for_tf32_and_the_setup_applies_it(ds3, tmp_path):
    try:
        precision.use("tf32")
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert torch.backends.cudnn.allow_tf32
        precision.use("fp32")
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
        assert not torch.backends.cudnn.allow_tf32
    finally:
        precision.use("fp32")
    spec, _ = ds3
    assert stage_setup.engine_key(spec) == stage_setup.engine_key(
        spec.model_copy(update={"engine": spec.engine.model_copy(update={"precision": "fp32"})}))
    bf16 = spec.model_copy(update={"engine": spec.engine.model_copy(update={"precision": "bf16"})})
    assert stage_setup.engine_key(bf16)["precision"] == "bf16"
    partition = Path(spec.storage.path).parent / "partition"   # the ds3 fixture's
    assert stage_setup.setup(bf16, 0, partition).ctx.precision == "bf16"
