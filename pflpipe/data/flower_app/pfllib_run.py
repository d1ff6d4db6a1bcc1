"""Run PFLlib's FedAvg on this export as pflpipe trains it; no pflpipe needed.

    python pfllib_run.py PFLLIB_DIR [main.py arguments, as in README.md]

It runs PFLlib's own `system/main.py` (in `PFLLIB_DIR/system`) with four changes, made at run time
(PFLlib's files are not edited):
- PFLlib's `DNN` ends in `F.log_softmax`, and its FedAvg splits the model into a base (the DNN with
  `fc` replaced by `nn.Identity`) and a head (`fc`): the log_softmax then falls on the 100 hidden
  features, between `fc1` and the head, and the network is no longer the MLP pflpipe trains. The
  log_softmax is left out (PFLlib's clients train with `nn.CrossEntropyLoss`, which applies it);
- the global model starts from `initial_weights.pt` (pflpipe's `base.1.*` is `base.fc1.*` here);
- local training takes pflpipe's batch order (`pflpipe_fedavg.task.batch_order`; PFLlib's
  DataLoader shuffles with its own RNG and drops each client's last short batch);
- every evaluation's per-client test accuracies are written to `pfllib_history.json` here.
"""

import json
import os
import runpy
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pflpipe_fedavg import task  # noqa: E402 - after the path is set


def main() -> None:
    """Patch PFLlib, then run its main.py with the remaining arguments."""
    system = Path(sys.argv[1]).resolve() / "system"
    sys.path.insert(0, str(system))
    os.chdir(system)
    from flcore.clients import clientavg
    from flcore.servers import serverbase
    from flcore.trainmodel import models
    from utils.data_utils import read_client_data

    package = task.Package.load(HERE)
    models.DNN.forward = lambda self, x: self.fc(torch.relu(self.fc1(torch.flatten(x, 1))))
    initial = {k.replace("base.1.", "base.fc1."): v for k, v in package.initial_weights().items()}
    server_init = serverbase.Server.__init__

    def init(self, args, times):
        args.model.load_state_dict(initial)   # before the server and clients copy it
        server_init(self, args, times)

    def train(self):
        data = read_client_data(self.dataset, self.id, is_train=True)
        x, y = torch.stack([s for s, _ in data]), torch.stack([t for _, t in data])
        server_round = self.train_time_cost["num_rounds"] + 1
        self.model.train()
        for ids in task.batch_order(len(y), self.batch_size, self.local_epochs, task.member_seed(
                package.settings["seed"], 0, server_round, self.id, 0)):
            loss = self.loss(self.model(x[ids]), y[ids])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        self.train_time_cost["num_rounds"] += 1

    history, test_metrics = [], serverbase.Server.test_metrics

    def scored(self):
        ids, counts, correct, auc = test_metrics(self)
        history.append({str(i): c / n for i, n, c in zip(ids, counts, correct, strict=True)})
        (HERE / "pfllib_history.json").write_text(json.dumps(history) + "\n")
        return ids, counts, correct, auc

    serverbase.Server.__init__, serverbase.Server.test_metrics = init, scored
    clientavg.clientAVG.train = train
    sys.argv = ["main.py", *sys.argv[2:]]
    runpy.run_path(str(system / "main.py"), run_name="__main__")


if __name__ == "__main__":
    main()
