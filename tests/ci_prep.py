"""What .ci/run prepares beside the test suite: the tests that need it wait for it here.

.ci/run installs Debian's Chromium, then a container engine and the CPU image, in the background
while the suite runs, and writes each step's exit code into the folder `$PFLPIPE_CI_PREP`
(`browser`, then `done`) and its output into `log` there. Outside .ci/run the variable is unset
and nothing waits.
"""

import os
import time
from pathlib import Path

import pytest

#: How long a step started by .ci/run may still take when the first test needs it.
WAIT_S = 1800


def wait_for(step: str, what: str) -> None:
    """Wait for .ci/run's `step`; fail the test, with the set-up's log, if it did not succeed."""
    folder = os.environ.get("PFLPIPE_CI_PREP")
    if not folder:
        return
    marker, log = Path(folder) / step, Path(folder) / "log"
    deadline = time.monotonic() + WAIT_S
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(2)
    code = marker.read_text().strip() if marker.exists() else None
    if code != "0":
        text = log.read_text(errors="replace") if log.exists() else ""
        state = f"exit {code}" if code else f"not done after {WAIT_S} s"
        pytest.fail(f"{what} of .ci/run did not succeed ({state}):\n{text[-4000:]}",
                    pytrace=False)
