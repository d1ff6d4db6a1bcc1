"""The Flower ClientApp: a thin wrapper around `task.train` and `task.evaluate`.

A SuperNode's `partition-id` (node config) is the pflpipe client it plays.
"""

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from . import task

app = ClientApp()


def _client(context: Context) -> tuple[task.Package, int]:
    return (task.Package.load(task.package_dir(context.run_config)),
            int(context.node_config["partition-id"]))


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Say which partition (pflpipe client) this node holds."""
    _, client = _client(context)
    return Message(RecordDict({"metrics": MetricRecord({"partition-id": client})}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of local training from the global weights in the message."""
    package, client = _client(context)
    weights = msg.content["arrays"].to_torch_state_dict()
    server_round = int(msg.content["config"]["server-round"])
    trained, n, loss = task.train(package, client, weights, server_round)
    metrics = MetricRecord({"partition-id": client, "num-examples": n, "train-loss": loss})
    return Message(RecordDict({"arrays": ArrayRecord(trained), "metrics": metrics}),
                   reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Score the global weights in the message on this client's test split."""
    package, client = _client(context)
    loss, accuracy, n = task.evaluate(package, client, msg.content["arrays"].to_torch_state_dict())
    metrics = MetricRecord({"partition-id": client, "num-examples": n, "loss": loss,
                            "accuracy": accuracy})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
