"""What the processes of a local run import before they work (docs/performance.md, start-up).

Every stage is a process of its own and `pflpipe run` waits for each; torch alone costs ~2.5 CPU
seconds to import. The CLI and the stages that train nothing must not import it.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

HEAVY = ("torch", "sklearn", "matplotlib.pyplot")


@pytest.mark.parametrize("modules", [
    ("pflpipe.cli.run_verb", "pflpipe.pipelines.local_runner"),  # the CLI, before its pipeline runs
    ("pflpipe.stages.evaluate_fairness", "pflpipe.stages.collect_results",
     "pflpipe.report.report_writer", "pflpipe.tracking.runs"),     # the report stage
], ids=["cli", "evaluate_fairness"])
def test_processes_that_train_nothing_import_no_torch(modules):
    code = (f"import sys; import {', '.join(modules)}; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)

    assert result.stdout.strip() == "[]"


def test_a_training_stage_that_does_not_compile_imports_no_dynamo():
    # torch._dynamo (with sympy) cost ~2 CPU s per training process; only compiling needs it.
    code = ("import sys, torch; import pflpipe.stages.warm_start_fedavg, "
            "pflpipe.stages.personalize, pflpipe.stages.distill_grid_search, "
            "pflpipe.stages.train_local; "
            "from pflpipe.engine.compiled import pays_off; pays_off(torch.device('cpu'), 10); "
            "print(sorted(m for m in ('torch._dynamo', 'sympy', 'triton') if m in sys.modules))")

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)

    assert result.stdout.strip() == "[]"


SELECT = """
import json, sys
from pathlib import Path
from pflpipe.spec import Spec
from pflpipe.stages import select_teachers
spec = Spec.model_validate({"experiment": {"name": "t"}, "dataset": {"name": "digits"},
                            "partition": {"strategy": "ds1", "n_clients": 2}})
select_teachers.run(spec, Path(sys.argv[1]), Path(sys.argv[2]))
print(json.dumps(sorted(m for m in ("torch", "pflpipe.engine") if m in sys.modules)))
"""


def test_select_teachers_chooses_without_torch(tmp_path):
    # rounds 0-3 × clients 0-1; round 0 (the untrained model) is never a teacher. Client 0's
    # lowest validation loss is 0.2 in rounds 1 and 3 (the earliest wins); client 1's is 0.1 in
    # round 0, so among rounds 1-3 its 0.3 in round 2.
    losses = {0: (0.9, 0.1), 1: (0.2, 0.7), 2: (0.4, 0.3), 3: (0.2, 0.5)}
    rows = ["round,client,split,loss,accuracy,n_samples"]
    rows += [f"{r},{c},{split},{loss[c]},{1 - loss[c]},5" for r, loss in losses.items()
             for c in (0, 1) for split in ("val", "test")]
    (tmp_path / "round_metrics.csv").write_text("\n".join(rows) + "\n")

    result = subprocess.run([sys.executable, "-c", SELECT, str(tmp_path), str(tmp_path / "out")],
                            capture_output=True, text=True, check=True)

    assert result.stdout.strip() == "[]"
    chosen = json.loads((tmp_path / "out" / "teachers.json").read_text())["teachers"]
    assert [(t["client"], t["round"]) for t in chosen] == [(0, 1), (1, 2)]
    assert chosen[1]["val_loss"] == float(np.float32(0.3))   # float32, as the table was read
    assert (tmp_path / "out" / "teacher_rounds.png").stat().st_size > 0
