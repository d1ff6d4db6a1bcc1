"""FedAvg-FT: the warm start's final global model, fine-tuned by each client alone."""

import pytest
import torch

from pflpipe.algorithms.fedavg_ft import FedAvgFT
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import FedAvgFtParams
from pflpipe.stages import personalize, warm_start_fedavg
from pflpipe.training import csv_tables


def _fedavg_ft(head=frozenset(), lr=0.1):
    return FedAvgFT(FedAvgFtParams(name="fedavg_ft"), head=head, lr=lr, local_epochs=1)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_fedavg_ft_fine_tunes_the_given_model_per_client(line_ctx, clients, federate, trainer):
    # Prepare: start at w = 0.5; client 0 (1, 1), client 1 (1, −1); lr 0.1; two epochs.
    # Epoch 1: w_0 = 0.5 − 0.1·2(0.5 − 1) = 0.6;  w_1 = 0.5 − 0.1·2(0.5 + 1) = 0.2
    # Epoch 2: w_0 = 0.6 − 0.1·2(0.6 − 1) = 0.68; w_1 = 0.2 − 0.1·2(0.2 + 1) = −0.04
    # Execute
    result = federate(_fedavg_ft(), line_ctx, clients([(1, 1)], [(1, -1)]), {"w": [0.5]},
                      trainer=trainer, rounds=2)

    # Assert: the global model is never changed
    assert torch.allclose(result.state["model"]["w"].flatten(), torch.tensor([0.68, -0.04]))
    assert torch.allclose(result.global_params["w"], torch.tensor([0.5]))


def test_fedavg_ft_stage_starts_from_the_warm_starts_final_model(digits_ds3):
    # Prepare: a 2-round warm start on ds3, then FedAvg-FT for one epoch.
    spec, _, root = digits_ds3
    spec = spec.model_copy(update={"personalization": [FedAvgFtParams(name="fedavg_ft",
                                                                      epochs=1)]})
    partition, checkpoints = root / "partition", root / "ft-checkpoints"
    warm_start_fedavg.run(spec, 0, partition, checkpoints, root / "ft-fedavg")

    # Execute
    personalize.run(spec, 0, "fedavg_ft", partition, checkpoints, root / "ft")

    # Assert: before fine-tuning (round 0) every client scores exactly as the final global model
    final = {(int(r["client"]), r["split"]): r for r in csv_tables.read_csv(
        checkpoints / "round_metrics.csv") if r["round"] == "2"}
    start = [r for r in csv_tables.read_csv(root / "ft" / "history.csv")
             if r["round"] == "0" and r["split"] in ("val", "test")]
    assert len(start) == 40 and {r["scope"] for r in start} == {"", "global"}
    # ... and its global model (GA, scope global) is that final model in results.csv too
    ga = [r for r in csv_tables.read_csv(root / "ft" / "results.csv") if r["scope"] == "global"]
    assert len(ga) == 40
    for row in start + ga:
        reference = final[(int(row["client"]), row["split"])]
        assert float(row["accuracy"]) == pytest.approx(float(reference["accuracy"]))
        assert float(row["loss"]) == pytest.approx(float(reference["loss"]), rel=1e-5)


def test_fedavg_ft_batched_equals_sequential_after_3_epochs_on_ds3(digits_ds3, on_both_trainers,
                                                                  differences):
    _, s, _ = digits_ds3

    batched, sequential = on_both_trainers(_fedavg_ft(head=s.head, lr=0.05))

    assert differences(batched, sequential) == {}
