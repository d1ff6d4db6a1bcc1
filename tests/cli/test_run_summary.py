"""What `pflpipe run` prints when it is done: where each model's state_dicts are."""

import io
import json
from types import SimpleNamespace

from rich.console import Console

from pflpipe.cli.run import _summary


def test_summary_lists_per_client_models_apart_from_fedavgs_one_global_model(tmp_path):
    seed = tmp_path / "runs" / "r" / "seed-0"
    for model, files in (("fedavg", ["global.pt", "global_best_val.pt"]),
                         ("fedper", ["client_0000.pt", "client_0001.pt"]),
                         ("local", ["client_0000.pt"])):
        (seed / model / "models").mkdir(parents=True)
        for name in files:
            (seed / model / "models" / name).write_bytes(b"")
    report = tmp_path / "runs" / "r" / "report"
    report.mkdir()
    (report / "report.json").write_text(json.dumps({"answer": "fedper is best"}))
    out = io.StringIO()

    _summary(Console(file=out, width=400), tmp_path / "runs" / "r",
             {"report": report, "seed-0": seed}, SimpleNamespace(run_id=""), tmp_path, 1.0)

    [line] = [line for line in out.getvalue().splitlines() if line.lstrip().startswith("seed-0")]
    assert f"{seed}/<model>/models/client_*.pt  (fedper, local); fedavg/models/ (one global " \
           "model); per-client table" in line
