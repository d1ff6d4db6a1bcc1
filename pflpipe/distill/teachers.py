"""PersFL stage 1: the choice of each client's optimal teacher.

A client's optimal teacher is the round whose global model does best on the client's validation
split (thesis Alg. 1 lines 1-11, eq. 4.1).
"""

import torch
from torch import Tensor


def choose_rounds(val_loss: Tensor, val_accuracy: Tensor, criterion: str = "val_loss") -> Tensor:
    """Per client, the round with the lowest validation loss (or highest accuracy).

    Ties go to the earliest round.

    Args:
        val_loss: [R, C] validation loss of round r's global model on client c (rows are the
            candidate rounds, in order).
        val_accuracy: [R, C] the same for accuracy.
        criterion: "val_loss" or "val_accuracy".

    Returns:
        [C] row index of each client's teacher.

    >>> loss = torch.tensor([[0.9, 0.5], [0.4, 0.5], [0.4, 0.7]])
    >>> choose_rounds(loss, -loss).tolist()      # client 0: tie of rows 1 and 2 -> 1
    [1, 0]

    """
    score = val_loss if criterion == "val_loss" else -val_accuracy
    best = score.min(dim=0, keepdim=True).values
    rows = torch.arange(score.shape[0]).unsqueeze(1).expand_as(score)
    return torch.where(score == best, rows, score.shape[0]).min(dim=0).values
