"""The Flower ServerApp: `task.federate`'s loop, its clients reached by Flower messages.

It writes every round's per-client test scores to `flower_history.json` in the package.
"""

import json
import time

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from . import task

app = ServerApp()
HISTORY = "flower_history.json"


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run pflpipe's FedAvg rounds over the SuperNodes."""
    package = task.Package.load(task.package_dir(context.run_config))
    nodes = _partitions(grid, package.n_clients)

    def send(kind: str, clients: list[int], content: RecordDict) -> list[Message]:
        replies = list(grid.send_and_receive(
            [Message(content, nodes[c], kind) for c in clients]))
        failed = [reply.error for reply in replies if reply.has_error()]
        if failed or len(replies) != len(clients):
            raise RuntimeError(f"{kind}: {len(replies)} of {len(clients)} replies; {failed}")
        return replies

    def fit(clients, weights, server_round):
        content = RecordDict({"arrays": ArrayRecord(weights),
                              "config": ConfigRecord({"server-round": server_round})})
        return [(int(r.content["metrics"]["partition-id"]),
                 r.content["arrays"].to_torch_state_dict(),
                 int(r.content["metrics"]["num-examples"]))
                for r in send(MessageType.TRAIN, clients, content)]

    def score(weights):
        content = RecordDict({"arrays": ArrayRecord(weights)})
        scores = {}
        for reply in send(MessageType.EVALUATE, list(range(package.n_clients)), content):
            m = reply.content["metrics"]
            scores[int(m["partition-id"])] = (m["loss"], m["accuracy"], int(m["num-examples"]))
        return scores

    rows = task.federate(package, fit, score, context.run_config.get("num-server-rounds"))
    (package.root / HISTORY).write_text(json.dumps(rows) + "\n", encoding="utf-8")
    print(task.table(rows))


def _partitions(grid: Grid, n_clients: int, wait: float = 120.0) -> dict[int, int]:
    """Map each partition id to the node holding it (asks every node once)."""
    deadline = time.monotonic() + wait
    node_ids = list(grid.get_node_ids())
    while len(node_ids) < n_clients and time.monotonic() < deadline:
        time.sleep(0.5)
        node_ids = list(grid.get_node_ids())
    if len(node_ids) < n_clients:
        raise RuntimeError(f"{len(node_ids)} SuperNodes connected; the package has {n_clients} "
                           "partitions (set num-supernodes to it)")
    replies = grid.send_and_receive(
        [Message(RecordDict(), node, MessageType.QUERY) for node in node_ids])
    return {int(r.content["metrics"]["partition-id"]): r.metadata.src_node_id for r in replies}
