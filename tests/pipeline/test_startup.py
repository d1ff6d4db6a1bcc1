"""What the processes of a local run import before they work (docs/performance.md, start-up).

Every stage is a process of its own and `pflpipe run` waits for each; torch alone costs ~2.5 CPU
seconds to import. The CLI and the stages that train nothing must not import it.
"""

import subprocess
import sys

import pytest

HEAVY = ("torch", "sklearn", "matplotlib.pyplot")


@pytest.mark.parametrize("modules", [
    ("pflpipe.cli.run", "pflpipe.pipelines.local"),          # the CLI, before its pipeline runs
    ("pflpipe.stages.evaluate_fairness", "pflpipe.stages.collect_results",
     "pflpipe.metrics.report", "pflpipe.tracking.runs"),     # the report stage
], ids=["cli", "evaluate_fairness"])
def test_processes_that_train_nothing_import_no_torch(modules):
    code = (f"import sys; import {', '.join(modules)}; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)

    assert result.stdout.strip() == "[]"
