"""What a training stage logs per client (its rounds' progress: `pflpipe.events`)."""

from collections.abc import Callable

import torch

from pflpipe.layout import client_file
from pflpipe.tracking import Tracker, vocabulary


def log_clients(tracker: Tracker, stage: str, model: str, results: list[dict],
                history: list[dict], extra: Callable[[int], dict] | None = None,
                models: dict[str, dict] | None = None, *, seed: int | None = None,
                template: torch.nn.Module | None = None) -> None:
    """One MLflow child run per client, in the metric vocabulary of `pflpipe.tracking.vocabulary`.

    Each run (named ``client 3 · fedper``, `seed` appended when given) holds the per-round
    history (step = round), the final ``best.*`` and ``last.*`` values, `extra` params and, when
    given, the client's model (`models["client_0000"]`): an MLflow model loaded into `template`,
    or a state_dict artifact without one. `tracker` itself gets the mean over clients of every
    metric, so the algorithms' runs compare on one chart.
    """
    per_client_rounds, per_client_final = [], []
    # newest first in the runs table: created last to first, client 0 is listed first
    for client in sorted({int(row["client"]) for row in results}, reverse=True):
        tags = {"client_id": str(client), "algorithm": model, "stage": stage}
        rounds = vocabulary.round_rows(r for r in history if int(r["client"]) == client)
        final = vocabulary.final_metrics(r for r in results if int(r["client"]) == client)
        with tracker.child(vocabulary.run_name(model, client, seed), tags) as run:
            state, model_id = (models or {}).get(client_file(client)), None
            if state is not None and template is not None:
                # the network's own keys; other state groups are prefixed "<group>/"
                template.load_state_dict({k: v for k, v in state.items() if "/" not in k})
                model_id = run.log_model(template, f"{model}-client-{client}")
            elif state is not None:
                run.log_state_dict(state, f"{model}-client-{client}")
            run.log_batch(rounds, final, extra(client) if extra else None, model_id=model_id)
        per_client_rounds.append(rounds)
        per_client_final.append(final)
    (means,) = vocabulary.mean_over_clients(per_client_final) or [{}]
    tracker.log_batch(vocabulary.mean_over_clients(per_client_rounds, "round"),
                      {**means, **vocabulary.compute_totals(per_client_final)})
