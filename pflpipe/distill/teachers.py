"""PersFL stage 1: the choice of each client's optimal teacher.

A client's optimal teacher is the round whose global model does best on the client's validation
split (thesis Alg. 1 lines 1-11, eq. 4.1). NumPy only: the select_teachers stage imports no torch
(docs/performance.md, start-up).
"""

import numpy as np


def choose_rounds(val_loss, val_accuracy, criterion: str = "val_loss") -> np.ndarray:
    """Per client, the round with the lowest validation loss (or highest accuracy).

    Ties go to the earliest round.

    Args:
        val_loss: [R, C] validation loss of round r's global model on client c (rows are the
            candidate rounds, in order): an array, or anything `np.asarray` takes (a CPU tensor).
        val_accuracy: [R, C] the same for accuracy.
        criterion: "val_loss" or "val_accuracy".

    Returns:
        [C] row index of each client's teacher.

    >>> loss = np.array([[0.9, 0.5], [0.4, 0.5], [0.4, 0.7]])
    >>> choose_rounds(loss, -loss).tolist()      # client 0: tie of rows 1 and 2 -> 1
    [1, 0]

    """
    score = np.asarray(val_loss if criterion == "val_loss" else val_accuracy, dtype=np.float64)
    return np.argmin(score if criterion == "val_loss" else -score, axis=0)  # first of ties
