"""What a training stage logs of its clients: one run per model, every client in its tables."""

from collections.abc import Callable

from pflpipe.tracking import Tracker, vocabulary


def log_clients(tracker: Tracker, results: list[dict], history: list[dict],
                extra: Callable[[int], dict] | None = None,
                models: dict[str, dict] | None = None) -> None:
    """Log a model's clients in bulk into its run `tracker` (no run per client).

    The run gets, in the metric vocabulary of `pflpipe.tracking.vocabulary`, the mean over
    clients of every per-round and final metric (so the algorithms' runs compare on one chart)
    and the clients' compute totals, in batched requests; every client's own values as two
    tables (`vocabulary.CLIENTS_TABLE`: a row per client with its final ``best.*``, ``last.*``
    and `extra` values; `vocabulary.CLIENT_HISTORY_TABLE`: a row per client and round; their
    columns the metrics' names with slashes for dots, `vocabulary.table_column`); and,
    when given, every client's state_dict in one file (``models/clients.pt``, a dict by
    ``client_0000``).
    """
    final_rows, round_rows, per_client_rounds, per_client_final = [], [], [], []
    by_client: dict[int, tuple[list, list]] = {}
    for row in results:   # each client's rows, in the tables' order, in one pass over each
        by_client.setdefault(int(row["client"]), ([], []))[0].append(row)
    for row in history:
        by_client.setdefault(int(row["client"]), ([], []))[1].append(row)
    for client in sorted(c for c, (own, _) in by_client.items() if own):
        own_results, own_history = by_client[client]
        rounds = vocabulary.round_rows(own_history)
        final = vocabulary.final_metrics(own_results)
        final_rows.append(_columns({"client": client, **final, **(extra(client) if extra else {})}))
        round_rows += [_columns({"client": client, **row}) for row in rounds]
        per_client_rounds.append(rounds)
        per_client_final.append(final)
    (means,) = vocabulary.mean_over_clients(per_client_final) or [{}]
    tracker.log_batch(vocabulary.mean_over_clients(per_client_rounds, "round"),
                      {**means, **vocabulary.compute_totals(per_client_final)})
    tracker.log_table(final_rows, vocabulary.CLIENTS_TABLE)
    tracker.log_table(round_rows, vocabulary.CLIENT_HISTORY_TABLE)
    if models:
        tracker.log_state_dict(models, vocabulary.CLIENT_MODELS)


def _columns(row: dict) -> dict:
    return {vocabulary.table_column(name): value for name, value in row.items()}
