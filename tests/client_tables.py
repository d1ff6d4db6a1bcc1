"""Read an algorithm run's per-client MLflow tables (`pflpipe.tracking.client_tables.log_clients`).

`MlflowClient.load_table` searches the process's global tracking URI rather than the client's,
so the tests read the table artifact themselves.
"""

import json
import tempfile

from pflpipe.tracking import vocabulary


def client_table(client, run_id: str, name: str = vocabulary.CLIENTS_TABLE) -> list[dict]:
    """The rows of one of a run's tables, each a dict by metric name (NaN cells: None)."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(client.download_artifacts(run_id, name, tmp)) as handle:
            table = json.load(handle)
    assert not [c for c in table["columns"] if "." in c], table["columns"]  # the UI shows none
    return [{vocabulary.metric_of(k): v for k, v in zip(table["columns"], row, strict=True)}
            for row in table["data"]]


def client_history(client, run_id: str, client_id: int, metric: str) -> list[tuple[int, float]]:
    """(round, value) of one client's metric, rounds where it has a value, ascending."""
    rows = client_table(client, run_id, vocabulary.CLIENT_HISTORY_TABLE)
    return sorted((row["round"], row[metric]) for row in rows
                  if row["client"] == client_id and row.get(metric) is not None)
