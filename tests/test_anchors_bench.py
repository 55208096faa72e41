"""The anchors' benchmark harness (scripts/bench/anchors.py) without the authors' code, and the two things of the
library it reads: ``--clock cpu`` (budget and history times in CPU seconds) and the ``exchanges`` count."""
import csv
import importlib.util
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fedsciml as fs
from fedsciml.cli.main import main
from fedsciml.options import OptionError
from fedsciml.runtime import transport as transport_mod

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"dim": 2, "n_interior": 30, "n_boundary": 3}
_spec = importlib.util.spec_from_file_location("anchors_bench", ROOT / "scripts" / "bench" / "anchors.py")
anchors = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = anchors  # dataclasses look their module up
_spec.loader.exec_module(anchors)


def test_fedsciml_side_reads_a_tiny_real_run_into_rows(tmp_path):
    out = tmp_path / "gn.json"
    code = main(["solve", "poisson", "--dim", "2", "--n-interior", "30", "--n-boundary", "3", "--clients", "2",
                 "--method", "gn", "--rounds", "3", "--threads", "1", "--clock", "cpu", "--json", str(out),
                 "--quiet"])
    assert code == 0
    d = json.loads(out.read_text())
    info = anchors.parse_fedsciml_json(out)
    assert info["clock"] == "cpu"
    assert info["evals"] == [(r["time_s"], r["rel_l2"], r["step"]) for r in d["history"]]
    assert info["floats_per_round"] == d["extra"]["floats_per_round"] > 0
    assert info["exchanges"] == d["extra"]["exchanges"] >= 3
    assert info["n_params"] == d["n_params"] and info["steps"] == d["history"][-1]["step"]
    job = anchors.Job("exp10", "fedsciml:gn", ["x"], {}, tmp_path / "gn.log", out)
    job.log.write_text("")
    job.result.update(rc=0, peak_rss_mb=123.0, child_cpu_s=1.0, wall_s=1.0)
    last = d["history"][-1]
    rows = anchors.collect(job, [last["time_s"], 1e9])
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["rel_l2"] == last["rel_l2"] and rows[0]["step_at"] == last["step"]  # at t exactly: included
    assert rows[1]["rel_l2"] == last["rel_l2"] and rows[0]["peak_rss_mb"] == 123.0
    assert "exp10" in anchors.table(rows, [last["time_s"], 1e9])


def test_exchanges_count_every_ask_of_the_method_and_not_the_monitoring(monkeypatch):
    asked = []
    ask = transport_mod.LocalTransport.ask

    def counting(self, client_ids, request):
        asked.append(request.query)
        return ask(self, client_ids, request)

    monkeypatch.setattr(transport_mod.LocalTransport, "ask", counting)
    res = fs.solve("poisson", "gn", clients=2, rounds=3, problem_options=SMALL)
    extra = res.extra
    assert extra["exchanges"] + extra["monitor_exchanges"] == len(asked) > 0


def test_cpu_clock_counts_this_process_cpu_seconds(tmp_path):
    c0 = time.process_time()
    res = fs.solve("poisson", "centralized", problem_options=SMALL, max_iters=5, clock="cpu")
    spent = time.process_time() - c0
    times = [r["time_s"] for r in res.history]
    assert times == sorted(times) and times[0] >= 0
    assert 0 < res.extra["solver_time_s"] <= spent  # solver CPU ⊂ the CPU this call used (evaluation excluded)
    assert res.options["clock"] == "cpu"


def test_a_clock_that_is_not_wall_or_cpu_is_one_line():
    with pytest.raises(OptionError) as e:
        fs.solve("poisson", "centralized", problem_options=SMALL, max_iters=1, clock="gpu")
    msg = str(e.value)
    assert "\n" not in msg and "gpu" in msg and "wall" in msg and "cpu" in msg


def test_checkpoint_takes_the_last_evaluation_at_or_before_it_never_interpolated():
    evals = [(12.0, 0.3, 5), (0.5, 1.0, 0), (29.99, 0.1, 9), (30.0, 0.09, 10), (31.0, 0.01, 11)]
    got = anchors.at_checkpoints(evals, [0.1, 12.0, 30.0, 100.0])
    assert got[0.1] is None                       # nothing that early
    assert got[12.0] == (0.3, 12.0, 5)            # exactly at t counts
    assert got[30.0] == (0.09, 30.0, 10)          # the last one at or before t, whatever the input order
    assert got[100.0] == (0.01, 31.0, 11)         # a run that ended earlier keeps its last value


def test_authors_log_pairs_each_evaluation_with_its_step_and_divides_by_the_solution_norm():
    text = "\n".join([
        "Number of parameters: 449",
        "[anchors] eval solver_s=0.1 abs=1.5 ref=1.5",
        "Step: 0000000, Loss: 121.7, L2 Error: 1.5, Interior: 120.0, Boundary: 1.7, Time: 0.1s",
        "some other line",
        "[anchors] eval solver_s=2.5 abs=0.03 ref=1.5",
        "Step: 0000041, Loss: 0.01, L2 Error: 0.03, Interior: 0.01, Boundary: 0.0, Time: 2.5s",
        "[anchors] eval solver_s=3.0 abs=0.0 ref=0.0",  # a run cut off before its Step line: not counted
    ])
    info = anchors.parse_authors_log(text)
    assert info["n_params"] == 449 and info["steps"] == 42
    assert info["evals"] == [(0.1, 1.0, 1), (2.5, 0.02, 42)]


def test_best_commands_come_from_the_experiment_folder(tmp_path):
    exp = anchors.EXPERIMENTS["exp10"]
    folder = tmp_path / "kfac_pinns_exp" / exp.folder
    (folder / "best_runs").mkdir(parents=True)
    (folder / "plot.py").write_text('sweep_ids = {  # ids\n    "aa11": "KFAC*",\n    # "bb22": "Adam",  # old\n'
                                    '    "cc33": "Adam",\n}\n')
    cmd = "python ../../train.py --wandb --optimizer=KFAC --KFAC_lr=auto --dim_Omega=5 --num_seconds=3000"
    (folder / "best_runs" / "p_aa11_best_meta.csv").write_text(f'config,name\n"{{\'cmd\': \'{cmd}\'}}",x\n')
    got = anchors.best_commands(tmp_path, exp)
    assert got == {"KFAC*": ["--optimizer=KFAC", "--KFAC_lr=auto", "--dim_Omega=5"]}  # Adam: no meta file
    (tmp_path / "kfac_pinns_exp" / "train.py").write_text("")
    jobs = anchors.plan(["exp10"], ["authors:KFAC*", "authors:Adam"], 30.0, [30.0], tmp_path, tmp_path,
                        sys.executable, sys.executable)
    assert jobs[0].cmd[-1] == "--num_seconds=30" and jobs[0].cmd[3] == "30"
    assert "the authors tuned no Adam" in jobs[1].skipped


def test_missing_authors_checkout_is_one_clear_line(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "anchors.py"), "--anchors-dir",
                        str(tmp_path / "nowhere"), "--exps", "exp10", "--runs", "authors:KFAC*"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nowhere" in lines[0] and "kfac_pinns_exp/train.py" in lines[0]
    with pytest.raises(anchors.BenchError, match="runs need --anchors-dir"):
        anchors.parse_args(["--runs", "authors:KFAC*"])
    with pytest.raises(anchors.BenchError, match="unknown fedsciml:nope; allowed"):
        anchors.parse_args(["--runs", "fedsciml:nope"])


def test_docs_table_goes_between_the_markers(tmp_path):
    f = tmp_path / "scale.md"
    f.write_text("a\n<!-- anchors-table:begin -->\nold\n<!-- anchors-table:end -->\nb\n")
    anchors.write_docs(f, "| new |")
    assert f.read_text() == "a\n<!-- anchors-table:begin -->\n| new |\n<!-- anchors-table:end -->\nb\n"
    assert math.isnan(anchors.parse_authors_log("[anchors] eval solver_s=1 abs=1 ref=0\nStep: 0000001, Loss: 1, "
                                                "L2 Error: 1, Interior: 1, Boundary: 0, Time: 1.0s")["evals"][0][1])


def test_federated_runs_share_the_presets_points_among_the_clients(tmp_path, monkeypatch):
    """The preset's counts are totals (issue 37): the gn run passes no point count of its own, so its 4 clients
    share the preset's points — as many as the centralized run and the authors' (the script divided them by 4
    before, which after that change left gn a quarter of the points)."""
    monkeypatch.setattr(anchors, "preset_points", lambda python, exp: (3000, 500))
    jobs = anchors.plan(["exp10"], ["fedsciml:gn", "fedsciml:lm"], 30.0, [30.0], tmp_path, None, "py", "py")
    (gn, lm), (jg, _) = (" ".join(j.cmd) for j in jobs), jobs
    assert "--clients 4 --method gn" in gn and "--preset exp10" in gn and "--n-interior" not in gn
    assert "--n-interior" not in lm and "--preset exp10" in lm
    assert jg.note == "4 clients share 3000 + 500 points"
    assert all("--device cpu --threads 1 --clock cpu --budget 30" in c for c in (gn, lm))
    from fedsciml.problems import get_problem

    pb = get_problem("poisson", dim=2, n_interior=40, n_boundary=8)  # totals: 4 clients hold the 40 + 8 points
    assert sum(o.n_residuals for o in pb.client_objectives(4, seed=0)) == \
        sum(o.n_residuals for o in pb.client_objectives(1, seed=0))


def test_render_reads_back_the_csv_it_wrote(tmp_path, capsys):
    rows = [{"exp": "exp10", "run": r, "side": r.split(":")[0], "note": "", "n_params": 449, "checkpoint_s": t,
             "rel_l2": v, "at_s": t - 1, "step_at": 3, "steps": 9, "peak_rss_mb": 400.0, "status": "ok",
             "floats_per_round": None, "exchanges": None}
            for r, v in (("fedsciml:lm", 1e-4), ("authors:KFAC*", 1e-2)) for t in (10.0, 30.0)]
    f = tmp_path / "a.csv"
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=anchors.CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    assert anchors.read_csv(f)[0]["rel_l2"] == 1e-4 and anchors.read_csv(f)[0]["exchanges"] is None
    assert anchors.main(["--render", str(f)]) == 0
    out = capsys.readouterr().out
    assert "rel L2 @ 30 s" in out and "ratio 0.01" in out and "fedsciml best fedsciml:lm 1.00e-04" in out


def test_a_run_after_at_runs_on_the_named_experiments_only_in_the_order_given(tmp_path, monkeypatch):
    monkeypatch.setattr(anchors, "preset_points", lambda python, exp: (3000, 500))
    a = anchors.parse_args(["--exps", "exp19,exp16", "--runs", "fedsciml:lm,fedsciml:matfree@exp16"])
    assert a.exps == ["exp19", "exp16"] and a.runs == ["fedsciml:lm", "fedsciml:matfree@exp16"]
    jobs = anchors.plan(a.exps, a.runs, 30.0, [30.0], tmp_path, None, "py", "py")
    assert [(j.exp, j.run) for j in jobs] == [("exp19", "fedsciml:lm"), ("exp16", "fedsciml:lm"),
                                              ("exp16", "fedsciml:matfree")]
    assert jobs[2].log.name == "exp16-fedsciml-matfree.log"
    with pytest.raises(anchors.BenchError, match=r"after '@' give experiments of --exps .*got exp10"):
        anchors.parse_args(["--exps", "exp16", "--runs", "fedsciml:lm@exp10"])
    with pytest.raises(anchors.BenchError, match="unknown fedsciml:nope; allowed"):
        anchors.parse_args(["--exps", "exp16", "--runs", "fedsciml:nope@exp16"])


def test_gpu_runs_take_the_wall_clock_and_see_the_gpu_and_authors_runs_are_refused(tmp_path, monkeypatch):
    """``--device cuda``: fedsciml's runs get ``--device cuda --clock wall`` and an environment that keeps CUDA
    visible (the CPU runs hide it); the authors' driver measures CPU seconds, so their runs are refused by name."""
    monkeypatch.setattr(anchors, "preset_points", lambda python, exp: (3000, 500))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    a = anchors.parse_args(["--exps", "exp16", "--runs", "fedsciml:lm,fedsciml:fipa", "--device", "cuda"])
    jobs = anchors.plan(a.exps, a.runs, 30.0, [30.0], tmp_path, None, "py", "py", device=a.device)
    assert all("--device cuda --threads 1 --clock wall --budget 30" in " ".join(j.cmd) for j in jobs)
    assert all(j.env["CUDA_VISIBLE_DEVICES"] == "0" for j in jobs)
    assert "--clients 4 --method fipa" in " ".join(jobs[1].cmd)
    cpu = anchors.plan(a.exps, ["fedsciml:lm"], 30.0, [30.0], tmp_path, None, "py", "py")
    assert cpu[0].env["CUDA_VISIBLE_DEVICES"] == "" and "--clock cpu" in " ".join(cpu[0].cmd)
    with pytest.raises(anchors.BenchError, match="--device cuda: authors:\\* runs measure CPU seconds"):
        anchors.parse_args(["--exps", "exp16", "--runs", "authors:KFAC*", "--device", "cuda", "--anchors-dir", "x"])


def test_authors_logged_runs_are_read_at_the_last_log_before_each_checkpoint_and_made_relative(tmp_path,
                                                                                                monkeypatch, capsys):
    """--render CSV --authors-logs DIR: each optimizer of plot.py's sweep_ids with a best_runs history gives an
    authors-log row; their l2_error is absolute, so it is divided by |u|_RMS (here a fake 2.0); the value at t is
    their last log at or before t, never interpolated; a sweep without a history file gives no row.  The rel L2
    values are compared bitwise: dividing by 2.0 changes only the exponent, so 0.2 / 2.0 is the double 0.1."""
    exp = anchors.EXPERIMENTS["exp16"]
    folder = tmp_path / "kfac_pinns_exp" / exp.folder
    (folder / "best_runs").mkdir(parents=True)
    (tmp_path / "kfac_pinns_exp" / "train.py").write_text("")
    (folder / "plot.py").write_text('sweep_ids = {\n    "aa11": "KFAC*",\n    "cc33": "Adam",\n}\n')
    (folder / "best_runs" / "kfac-pinns_poisson_xyz_aa11_best_history.csv").write_text(
        "time,step,l2_error,loss\n1.0,0,2.0,9\n25.0,10,0.2,1\n31.0,11,0.1,1\n59.5,20,0.02,1\n")
    monkeypatch.setattr(anchors, "solution_rms", lambda python, e: 2.0)
    rows = anchors.authors_logged(tmp_path, ["exp16"], [30.0, 60.0], "py")
    assert [(r["run"], r["checkpoint_s"], r["rel_l2"], r["at_s"], r["step_at"]) for r in rows] == [
        ("authors-log:KFAC*", 30.0, 0.1, 25.0, 10), ("authors-log:KFAC*", 60.0, 0.01, 59.5, 20)]
    assert rows[0]["steps"] == 20 and rows[0]["side"] == "authors-log"
    f = tmp_path / "gpu.csv"
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=anchors.CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows([{"exp": "exp16", "run": "fedsciml:lm", "side": "fedsciml", "checkpoint_s": t, "rel_l2": v,
                      "status": "ok"} for t, v in ((30.0, 1e-3), (60.0, 1e-4))])
    assert anchors.main(["--render", str(f), "--authors-logs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "exp16 @ 60 s: fedsciml best fedsciml:lm 1.00e-04, authors' best logged authors-log:KFAC* 1.00e-02" in out
    with pytest.raises(anchors.BenchError, match="--authors-logs is read with --render"):
        anchors.parse_args(["--authors-logs", str(tmp_path)])
