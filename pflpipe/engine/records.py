"""Names of what the engine records per client and round besides scores (torch-free).

Compute (counted by the engine from what it ran, `pflpipe.engine.accounting`) and mechanism
diagnostics (an algorithm's `diagnostics` hooks) travel on the engine's ``train`` rows into
history.csv; a client's compute summed over its rounds goes into results.csv. The report, the
tracking vocabulary and the stages read these names from here.
"""

#: Compute of one client in one round (history.csv) or over its whole run (results.csv), defined
#: in docs/contracts.md ("Compute") and `pflpipe.engine.accounting`: local training's optimizer
#: steps and samples processed (a sample counts once per network pass over it: forward and
#: backward), bytes uploaded and downloaded, and the steps and samples of the training done
#: before scoring (evaluation-time adaptation, on an evaluation's test rows).
TRAINING = ("steps", "samples", "bytes_sent", "bytes_received")
ADAPTATION = ("adaptation_steps", "adaptation_samples")
COMPUTE = (*TRAINING, *ADAPTATION)
#: history.csv column of a diagnostic ``name`` of an algorithm (``diag.tau``; a vector's entry i
#: is ``diag.name.i``); the same name is its MLflow metric.
DIAGNOSTIC_PREFIX = "diag."


def diagnostic_column(name: str) -> str:
    """The history.csv column of an algorithm's diagnostic `name`.

    >>> diagnostic_column("alpha")
    'diag.alpha'
    """
    return f"{DIAGNOSTIC_PREFIX}{name}"


def diagnostic_columns(fields) -> list[str]:
    """The diagnostic columns among `fields`, sorted.

    >>> diagnostic_columns(["round", "diag.tau", "loss", "diag.alpha"])
    ['diag.alpha', 'diag.tau']
    """
    return sorted(f for f in fields if f.startswith(DIAGNOSTIC_PREFIX))
