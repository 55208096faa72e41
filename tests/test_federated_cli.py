"""`python -m fedsciml solve … --clients K`: the federated CLI path (tiny sizes)."""
import json

from fedsciml.cli import main

SMALL = ["sin1d", "--clients", "2", "--n-samples", "20", "--rounds", "2", "--local-steps", "3", "--quiet"]


class _R:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _run(capsys, *args):
    """The CLI in-process (no interpreter start-up per call)."""
    capsys.readouterr()
    code = main(["solve", *args])
    out = capsys.readouterr()
    return _R(code, out.out, out.err)


def test_compare_prints_one_table_and_writes_every_run(tmp_path, capsys):
    out = tmp_path / "r.json"
    r = _run(capsys, *SMALL, "--method", "fipa", "--compare", "fedavg,gn", "--json", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("method"))
    assert "floats sent" in lines[head] and "rounds" in lines[head]
    assert [ln.split()[0] for ln in lines[head + 1:head + 4]] == ["fipa", "fedavg", "gn"]
    assert "final mse (fipa)" in r.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [x["method"] for x in runs] == ["fipa", "fedavg", "gn"]
    for x in runs:
        assert x["clients"] == 2 and x["history"][-1]["floats_sent"] > 0 and x["extra"]["rounds"] == 2


def test_exchanges_in_the_table_the_result_the_history_and_a_plot(tmp_path, capsys):
    """Every federated run counts its exchanges: the summary table's column, ``result.json`` (history rows and
    ``extra``), ``history.csv`` and ``error_vs_exchanges.png``; gn's one-exchange iteration against two."""
    import csv

    out = tmp_path / "run"
    r = _run(capsys, *SMALL, "--method", "gn", "--compare", "fedavg", "--out", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("method"))
    assert "exchanges" in lines[head]
    col = lines[head].replace("wall s", "wall_s").replace("cpu s", "cpu_s").split().index("exchanges")  # one token
    gn_row = lines[head + 1].split()
    assert gn_row[0] == "gn" and int(gn_row[col]) == 3  # θ₀'s statistics, then one exchange per LM iteration
    runs = json.loads((out / "result.json").read_text())["runs"]
    for x in runs:
        assert x["extra"]["exchanges"] == x["history"][-1]["exchanges_total"] > 0
    with open(next(out.glob("history*.csv"))) as f:
        rows = list(csv.DictReader(f))
    assert [int(row["exchanges_total"]) for row in rows] == [1, 2, 3]
    assert (out / "error_vs_exchanges.png").stat().st_size > 0
    two = tmp_path / "two.json"
    gn_args = [a for a in SMALL if a not in ("--local-steps", "3")]
    r = _run(capsys, *gn_args, "--method", "gn", "--exchange", "two", "--json", str(two))
    assert r.returncode == 0, r.stderr
    hist = json.loads(two.read_text())["history"]
    assert hist[-1]["exchanges_total"] == 1 + sum(2 if h["accepted"] else 1 for h in hist[1:])


def test_checkpoint_resume_from_the_command_line(tmp_path, capsys):
    ck = str(tmp_path / "ck")
    full = tmp_path / "full.json"
    part = tmp_path / "part.json"
    args = ["sin1d", "--clients", "2", "--n-samples", "20", "--method", "fedavg", "--local-steps", "3", "--quiet"]
    assert _run(capsys, *args, "--rounds", "4", "--json", str(full)).returncode == 0
    assert _run(capsys, *args, "--rounds", "2", "--checkpoint", ck).returncode == 0
    r = _run(capsys, *args, "--rounds", "4", "--checkpoint", ck, "--resume", "--json", str(part))
    assert r.returncode == 0, r.stderr
    a, b = json.loads(full.read_text()), json.loads(part.read_text())
    # bitwise: the resumed run performs the same operations in the same order as the uninterrupted one
    assert a["final"]["mse"] == b["final"]["mse"] and b["extra"]["resumed"]


def test_bad_federated_options_exit_2_with_one_line(capsys):
    for extra, word in ((["--method", "gn", "--participation", "0.5", "--local-steps", "100"], "--local-steps"),
                        (["--method", "gn", "--participation", "0.5"], "--participation"),
                        (["--resume"], "--checkpoint"),
                        (["--dropout", "1.5"], "dropout"),
                        (["--compare", "fedavg,nope"], "nope")):
        r = _run(capsys, *[a for a in SMALL if a not in ("--local-steps", "3")], *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert "Traceback" not in r.stderr and word in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_rejections_reach_the_result_json():
    from fedsciml.problems import get_problem
    from fedsciml.api import solve

    def hook(rnd, cid, msg):
        return {**msg, "delta": msg["delta"] * float("nan")} if cid == 1 else msg

    res = solve(get_problem("sin1d", n_samples=10), "fedavg", clients=2, rounds=1, local_steps=2, message_hook=hook)
    d = res.to_dict()
    assert d["extra"]["rejections"] == [{"round": 1, "client": 1, "reason": "field 'delta' contains non-finite values"}]


def test_compare_one_shot_gn_fedavg_on_ridge_prints_one_table(tmp_path, capsys):
    out = tmp_path / "r.json"
    r = _run(capsys, "ridge-linear", "--clients", "20", "--n-samples", "40", "--compare", "one-shot,gn,fedavg",
             "--rounds", "3", "--local-steps", "2", "--quiet", "--json", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("method"))
    assert [ln.split()[0] for ln in lines[head + 1:head + 4]] == ["one-shot", "gn", "fedavg"]
    assert lines[head + 4].startswith("final mse (one-shot)")
    runs = json.loads(out.read_text())["runs"]
    assert [x["method"] for x in runs] == ["one-shot", "gn", "fedavg"]
    assert [h["round"] for h in runs[0]["history"]] == [0, 1] and runs[2]["extra"]["rounds"] == 3


def test_a_compared_run_that_fails_keeps_the_runs_that_finished(tmp_path, capsys):
    """gn runs, then one-shot at σ = 0 on 32 training rows for d = 50 features cannot solve (a singular Gram,
    found only at run time): gn's table row, --json and --out are still written (they were lost), the failure
    ends the command with its own one line and exit code, as alone."""
    out, js = tmp_path / "run", tmp_path / "r.json"
    tiny = ["ridge-linear", "--clients", "2", "--n-samples", "20", "--dim", "50", "--sigma", "0", "--rounds", "1",
            "--no-progress"]
    r = _run(capsys, *tiny, "--method", "gn", "--compare", "one-shot", "--out", str(out), "--json", str(js))
    alone = _run(capsys, *tiny, "--method", "one-shot")
    assert r.returncode == alone.returncode == 2
    assert r.stderr.splitlines()[-1] == alone.stderr.splitlines()[-1]
    assert r.stderr.splitlines()[-1].startswith("error: G + σI is not (numerically) positive definite")
    assert "one-shot failed: the run(s) that finished (gn) are kept" in r.stderr
    head = r.stdout.splitlines()
    row = next(i for i, ln in enumerate(head) if ln.startswith("method")) + 1
    assert head[row].split()[0] == "gn"
    for doc in (json.loads(js.read_text()), json.loads((out / "result.json").read_text())):
        assert doc["method"] == "gn" and doc["history"]
    assert (out / "history.csv").exists()
