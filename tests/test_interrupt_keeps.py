"""Issue 38, finding 3: Ctrl-C and SIGTERM keep the finished work.  A run interrupted after some rounds writes
result.json (``stop_reason`` ``"interrupted"``), the history and the model of the last finished round — the round
of the checkpoint it wrote (θ bitwise the same) — and exits 130 (SIGINT) / 143 (SIGTERM).  A run that a dead site
stops writes its partial result and model the same way (exit 1).

The signal is sent when the run's progress line of round 3 has been read (not after a fixed sleep); the run has
100,000 rounds, so it is always stopped mid-run; each subprocess is bounded by a timeout."""
from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys

import torch

import fedsciml as fs
from fedsciml.runtime import checkpoint as ckpt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cli_main = importlib.import_module("fedsciml.cli.main")


def _sigint_as_default():
    """In the child before it starts: SIGINT's default disposition, whatever pytest was started with — a shell
    starts a background job (``cmd &``) with SIGINT ignored, Python then installs no KeyboardInterrupt handler,
    and the child would run on through the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_until(args, signum, line="[    3]", timeout=240):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "MPLBACKEND": "Agg"}
    p = subprocess.Popen([sys.executable, "-m", "fedsciml", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_default)
    seen = []
    try:
        assert p.stderr is not None
        for ln in p.stderr:
            seen.append(ln)
            if line in ln:
                p.send_signal(signum)
                break
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, "".join(seen) + err, out


def test_an_interrupted_gn_run_writes_result_model_and_checkpoint_of_the_same_round(tmp_path):
    signum, status = signal.SIGINT, 130
    out, ck = tmp_path / "out", tmp_path / "ck"
    rc, err, _ = run_until(["solve", "sin1d", "--method", "gn", "--clients", "2", "--n-samples", "20", "--rounds",
                            "100000", "--every", "1", "--out", str(out), "--checkpoint", str(ck)], signum)
    assert rc == status, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("interrupted: gn stopped after step/round ")
    res = json.load(open(out / "result.json"))
    assert res["extra"]["stop_reason"] == "interrupted" and res["extra"]["stopped_by"] == "interrupted"
    k = res["extra"]["rounds"]
    assert k >= 2 and res["history"][-1]["step"] == k and [r["step"] for r in res["history"]] == list(range(k + 1))
    state = ckpt.read(ckpt.path_in(str(ck)))
    assert state["round"] == k  # the checkpoint of the same last finished round
    model = fs.load_model(str(out))
    theta = state["strategy"]["theta"]
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(out / "model.safetensors"))["theta"], theta)  # bitwise: the same θ
    p = fs.get_problem("sin1d", n_samples=20)
    assert res["final"]["mse"] == p.evaluate(theta)["mse"]
    assert model(torch.tensor([[0.5]], dtype=torch.float64)).shape == (1,)
    assert (out / "history.csv").exists()
    # and the run resumes from that checkpoint
    r = fs.solve(p, "gn", clients=2, rounds=k + 1, checkpoint=str(ck), resume=True)
    assert r.extra["resumed"] and r.extra["rounds"] == k + 1


def test_a_terminated_centralized_run_keeps_its_last_step_and_exits_143(tmp_path):
    rc, err, _ = run_until(["solve", "sin1d", "--n-samples", "20", "--optimizer", "adam", "--max-iters", "1000000",
                            "--every", "1", "--json", str(tmp_path / "r.json")], signal.SIGTERM, line="[    3]")
    assert rc == 143, err[-2000:]
    res = json.load(open(tmp_path / "r.json"))
    assert res["extra"]["stop_reason"] == "interrupted" and res["history"][-1]["step"] >= 3
    assert [r["step"] for r in res["history"]] == list(range(len(res["history"])))


def test_a_run_stopped_by_dead_sites_writes_its_partial_result_and_model(tmp_path, monkeypatch, capsys):
    """From round 3 every client's message is invalid (a site that died mid-run sends nothing usable): gn stops
    with exit 1, and --json/--out hold rounds 0..2 and their model."""
    from fedsciml.runtime import driver

    def hook(rnd, cid, msg):
        return {k: v * float("nan") if isinstance(v, torch.Tensor) else v for k, v in msg.items()} if rnd >= 3 else msg
    real = driver.plan
    monkeypatch.setattr(driver, "plan", lambda *a, **k: real(*a, **{**k, "message_hook": hook}))
    out = tmp_path / "out"
    rc = cli_main.main(["solve", "sin1d", "--method", "gn", "--clients", "2", "--n-samples", "20", "--rounds", "10",
                        "--quiet", "--out", str(out), "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err[-1].startswith("error: gn: round 3: no valid client message remained")
    assert "the rounds before are written" in err[-1]
    res = json.load(open(tmp_path / "r.json"))
    assert res["extra"]["stop_reason"] == "failed" and res["extra"]["rounds"] == 2
    assert "no valid client message" in res["extra"]["error"]
    assert json.load(open(out / "result.json"))["extra"]["rounds"] == 2 and os.path.exists(out / "model.safetensors")
