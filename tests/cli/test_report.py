"""`pflpipe report`: a hand-made table in, the report out; bad tables exit 2 without traceback."""

import json
import subprocess
import sys

from pflpipe.cli import main

# The console script's entry point, run in a fresh interpreter.
PFLPIPE = [sys.executable, "-c", "import sys; from pflpipe.cli import main; sys.exit(main())"]

# Percent, one seed, three clients. QoI of "ours" = ours − max(fedavg, local):
#   client 0: 80 − 70 = 10; client 1: 75 − 70 = 5; client 2: 60 − 65 = −5.
TABLE = """\
client,model,accuracy
0,local,60
0,fedavg,70
0,ours,80
1,local,70
1,fedavg,65
1,ours,75
2,local,65
2,fedavg,50
2,ours,60
"""


def write_table(tmp_path, text=TABLE):
    path = tmp_path / "per_client.csv"
    path.write_text(text)
    return path


def test_report_writes_the_report_and_prints_the_answers(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["report", str(write_table(tmp_path)), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    # ours is the only personalized model: nothing to compare it with, only the baselines
    assert "Best performing on test: nothing to compare: ours is the only" in printed
    assert str(out / "report.html") in printed
    data = json.loads((out / "report.json").read_text())
    ours = data["models"]["ours"]
    # PUI 2/3, API (10 + 5) / 2, APD −5, AA (80 + 75 + 60) / 3.
    assert ours["performance"]["PUI"] == 200 / 3
    assert (ours["performance"]["API"], ours["performance"]["APD"]) == (7.5, -5.0)
    assert ours["performance"]["AA"] == 215 / 3
    assert data["best"] is None and data["fairest"] is None  # a lone model is never "best"
    assert data["verdicts"]["best"]["status"] == "nothing to compare"
    # a table alone has no per-round history: no accuracy-over-rounds figure
    assert {p.name for p in (out / "figures").iterdir()} == {
        "client_accuracy_test.png", "qoi_test.png", "fairness_test.png"}
    assert (out / "report.md").is_file() and (out / "report.html").is_file()


def test_report_accepts_other_baseline_names(tmp_path, capsys):
    text = TABLE.replace("local", "solo").replace("fedavg", "central")
    out = tmp_path / "out"
    assert main(["report", str(write_table(tmp_path, text)), "-o", str(out), "--local", "solo",
                 "--global", "central", "--selection", "last_round"]) == 0
    data = json.loads((out / "report.json").read_text())
    assert data["baselines"] == {"local": "solo", "global": "central"}
    assert data["models"]["central"]["role"] == "global baseline"


def test_report_names_the_client_missing_a_baseline_with_exit_2(tmp_path, capsys):
    text = TABLE.replace("1,local,70\n", "")
    assert main(["report", str(write_table(tmp_path, text)), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "client 1 has no row for baseline model 'local'" in err
    assert "Traceback" not in err


def test_report_as_a_process_exits_0_then_2_without_traceback(tmp_path):
    table = write_table(tmp_path)
    ok = subprocess.run([*PFLPIPE, "report", str(table), "-o", str(tmp_path / "out")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "Fairest on test: nothing to compare: ours is the only" in " ".join(ok.stdout.split())
    assert json.loads((tmp_path / "out" / "report.json").read_text())["best"] is None
    table.write_text("client,model,acc\n0,local,1\n")
    bad = subprocess.run([*PFLPIPE, "report", str(table), "-o", str(tmp_path / "bad")],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert "missing column(s) accuracy" in bad.stderr and "Traceback" not in bad.stderr
