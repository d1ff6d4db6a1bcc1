"""A stage run by a `pflpipe` verb, with no runner reading: its events are lines for a person.

Inside a pipeline the same events are tagged JSON lines (tests/pipeline/test_tasklog.py,
tests/cli/test_run_control.py); here nothing parses them, so they read as text.
"""

import os
import pty
import subprocess
import sys
from pathlib import Path

from pflpipe.cli import main
from pflpipe.events import TAG

SPEC = """\
experiment: {{name: t, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: iid, n_clients: {clients}, fractions: {{train: 0.75, test: 0.25}}}}
tracking: {{enabled: false}}
"""
WARNING = ("warning: no validation split: best_val is each client's last round (or epoch), "
           "PersFL's teacher the last round, its (λ, T) chosen on train")


def spec(tmp_path: Path, clients: int, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(SPEC.format(out=tmp_path / "results", clients=clients))
    return path


def test_a_verbs_warning_is_text_and_bad_input_still_exits_2(tmp_path, capsys):
    assert main(["split", str(spec(tmp_path, 4)), "-o", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == WARNING and TAG.strip() not in out

    # into a directory holding the user's own file: refused, one clear line, exit 2
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "notes.txt").write_text("mine")
    code = main(["split", str(spec(tmp_path, 3, "three.yaml")), "-o", str(tmp_path / "q")])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.startswith("error: ")
    assert "Traceback" not in captured.err and TAG.strip() not in captured.out + captured.err


def test_the_console_script_on_a_terminal_prints_text(tmp_path):
    """The reported symptom: `pflpipe split` on a terminal showed `pflpipe-event {...}`."""
    leader, follower = pty.openpty()
    script = Path(sys.executable).with_name("pflpipe")
    with subprocess.Popen([str(script), "split", str(spec(tmp_path, 4)), "-o",
                           str(tmp_path / "p"), "--rows", "2"], stdout=follower,
                          stderr=follower, stdin=subprocess.DEVNULL) as process:
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process is done
                break
            if not chunk:
                break
            shown += chunk
        assert process.wait(timeout=120) == 0
    os.close(leader)
    text = shown.decode().replace("\r\n", "\n")
    assert text.splitlines()[0] == WARNING and TAG.strip() not in text
