"""scripts/bench/pinnacle.py: the commands it runs (the CLI users run, one thread, CPU-seconds budget, the same points
for every run), the rows it reads from a real run's JSON, the paper's figures from a transcribed CSV, and one tiny
end-to-end run."""
import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from fedsciml.cli.main import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pinnacle_bench", ROOT / "scripts" / "bench" / "pinnacle.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def test_plan_runs_the_cli_at_one_thread_on_the_same_points(tmp_path):
    a = bench.parse_args(["--cases", "poissonnd,pinv", "--budget", "20", "--hidden", "100,100,100,100,100"])
    jobs = bench.plan(a, tmp_path)
    assert [(j.exp, j.run) for j in jobs] == [(c, m) for c in ("poissonnd", "pinv") for m in ("centralized", "gn",
                                                                                               "fipa")]
    for j in jobs:
        c = j.cmd
        assert c[1:5] == ["-m", "fedsciml", "solve", "pinnacle"] and c[c.index("--method") + 1] == j.run
        for flag, value in (("--clients", "4"), ("--threads", "1"), ("--clock", "cpu"), ("--budget", "20"),
                            ("--device", "cpu"), ("--hidden", "100,100,100,100,100")):
            assert c[c.index(flag) + 1] == value, flag
        # point counts are totals split among the sites (issue 37): unset, the problem's own (never divided by K)
        assert "--n-interior" not in c and "--n-boundary" not in c
    given = bench.plan(bench.parse_args(["--cases", "pinv", "--n-interior", "800", "--n-boundary", "40"]), tmp_path)
    for j in given:
        assert j.cmd[j.cmd.index("--n-interior") + 1] == "800" and j.cmd[j.cmd.index("--n-boundary") + 1] == "40"
        assert j.env["OMP_NUM_THREADS"] == "1" and j.env["CUDA_VISIBLE_DEVICES"] == ""
    cuda = bench.plan(bench.parse_args(["--cases", "poissonnd", "--methods", "gn", "--device", "cuda"]), tmp_path)
    assert "CUDA_VISIBLE_DEVICES" not in cuda[0].env or cuda[0].env["CUDA_VISIBLE_DEVICES"] != ""


@pytest.mark.parametrize("argv, match", [(["--cases", "nope"], "unknown nope"), (["--methods", "adam"], "unknown adam"),
                                         (["--hidden", "100,x"], "--hidden must be"), (["--budget", "0"], "--budget"),
                                         (["--pinnacle-dir", "/nonexistent"], "has no ref/ folder"),
                                         (["--n-interior", "3"], "--n-interior must be at least --clients")])
def test_bad_arguments_are_one_line(argv, match):
    with pytest.raises(bench.BenchError, match=match) as e:
        bench.parse_args(argv)
    assert "\n" not in str(e.value)


def test_a_real_run_becomes_a_row_beside_the_papers_best(tmp_path, capsys):
    out = tmp_path / "gn.json"
    assert cli_main(["solve", "pinnacle", "--case", "poissonnd", "--method", "gn", "--clients", "2", "--rounds", "2",
                     "--n-interior", "20", "--n-boundary", "3", "--hidden", "5", "--threads", "1", "--clock", "cpu",
                     "--json", str(out), "--quiet"]) == 0
    capsys.readouterr()
    d = json.loads(out.read_text())
    pub = tmp_path / "pub.csv"
    pub.write_text("# synthetic figures for this test\ncase,method,l2re\npoissonnd,PINN,0.5\npoissonnd,LAAF,0.25\n")
    figures, source = bench.read_published(pub)
    assert figures == {"poissonnd": {"PINN": 0.5, "LAAF": 0.25}} and source == "synthetic figures for this test"
    job = bench.Job("poissonnd", "gn", ["x"], {}, tmp_path / "gn.log", out)
    job.log.write_text("")
    job.result.update(rc=0, peak_rss_mb=321.0, child_cpu_s=1.0, wall_s=2.0)
    row = bench.collect(job, figures)
    assert row["status"] == "ok" and row["l2re"] == d["final"]["l2re"] and row["steps"] == d["history"][-1]["step"]
    assert row["clients"] == 2 and row["published_best"] == 0.25 and row["published_method"] == "LAAF"
    text = bench.table([row])
    assert "| poissonnd | gn ×2 |" in text and "LAAF" in text and "321" in text
    bad = tmp_path / "bad.csv"
    bad.write_text("case,method,l2re\npoissonnd,PINN,much\n")
    with pytest.raises(bench.BenchError, match="row 2 needs case, method and a number l2re"):
        bench.read_published(bad)


def test_end_to_end_writes_the_csv_and_the_record(tmp_path):
    code = bench.main(["--cases", "poissonnd", "--methods", "gn", "--clients", "2", "--budget", "0.5",
                       "--n-interior", "40", "--n-boundary", "6", "--hidden", "4", "--out", str(tmp_path)])
    assert code == 0
    rows = list(csv.DictReader(open(tmp_path / "pinnacle.csv")))
    assert len(rows) == 1 and rows[0]["status"] == "ok" and float(rows[0]["l2re"]) > 0
    assert float(rows[0]["peak_rss_mb"]) > 0
    md = (tmp_path / "pinnacle.md").read_text()
    assert "| poissonnd | gn ×2 |" in md and "no `--published` file" in md
