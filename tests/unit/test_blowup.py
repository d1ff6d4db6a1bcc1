"""The blow-up rule (`pflpipe.engine.blowup`) by hand: pooled loss far above round 0's and
accuracy at chance, both needed."""

import pytest
import torch

from pflpipe.engine import blowup

COUNTS = torch.tensor([2, 2])      # validation samples per client
MAJORITY = torch.tensor([2, 1])    # their most frequent label's count: chance = 3 / 4
START = {"val_loss": torch.tensor([0.5, 0.25]), "val_accuracy": torch.tensor([1.0, 1.0]),
         "global_val_loss": torch.tensor([0.5, 0.25]),
         "global_val_accuracy": torch.tensor([1.0, 1.0])}


def _scores(loss, accuracy, global_loss=(0.5, 0.25), global_accuracy=(1.0, 1.0)):
    return {"val_loss": torch.tensor(loss), "val_accuracy": torch.tensor(accuracy),
            "global_val_loss": torch.tensor(global_loss),
            "global_val_accuracy": torch.tensor(global_accuracy)}


def test_blowup_needs_the_loss_factor_and_accuracy_at_chance_by_hand():
    # Pooled: loss (2·2.0 + 2·0.5)/4 = 1.25 against (2·0.5 + 2·0.25)/4 = 0.375, 3.33× > 3;
    # accuracy (2·0.5 + 2·0.5)/4 = 0.5 ≤ chance (2 + 1)/4 = 0.75. Worst client: 2.0/0.5 = 4
    # against 0.5/0.25 = 2.
    found = blowup.find(_scores([2.0, 0.5], [0.5, 0.5]), START, "val", COUNTS, MAJORITY, 3.0)

    assert found is not None and found.model == "personalized" and found.member == 0
    assert found.loss == pytest.approx(1.25) and found.start == pytest.approx(0.375)
    assert found.accuracy == pytest.approx(0.5) and found.chance == pytest.approx(0.75)
    text = found.describe("val", 3.0)
    assert "mean val loss rose to 1.25, 3.33× its round-0 value 0.375" in text
    assert "val accuracy fell to 50.0%" in text and "(75.0%)" in text


@pytest.mark.parametrize(("loss", "accuracy", "factor"), [
    ([2.0, 0.5], [1.0, 1.0], 3.0),   # loss up, predictions useful: over-fitting, not a blow-up
    ([0.6, 0.4], [0.5, 0.5], 3.0),   # at chance but the loss barely moved: never learned
    ([2.0, 0.5], [0.5, 0.5], 4.0),   # 3.33× is within a factor of 4
])
def test_no_blowup_without_both_conditions(loss, accuracy, factor):
    assert blowup.find(_scores(loss, accuracy), START, "val", COUNTS, MAJORITY, factor) is None


def test_the_global_model_is_watched_too():
    # The personalized model is fine; the global one collapsed: 6.4× the loss, 25 % accuracy.
    scores = _scores([0.5, 0.25], [1.0, 1.0], global_loss=(3.0, 1.8),
                     global_accuracy=(0.0, 0.5))

    found = blowup.find(scores, START, "val", COUNTS, MAJORITY, 3.0)

    assert found.model == "global" and found.accuracy == pytest.approx(0.25)


def test_majority_counts_per_client_by_hand():
    # clients: [3, 3, 1] → 2; [] → 0; [2, 2, 2, 0] → 3
    y, offsets = torch.tensor([3, 3, 1, 2, 2, 2, 0]), torch.tensor([0, 3, 3, 7])

    assert blowup.majority_counts(y, offsets).tolist() == [2, 0, 3]
