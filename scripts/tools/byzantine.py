"""Byzantine-client scenarios: the final error of each method with and without the robust options.

    PYTHONPATH=$PWD python scripts/tools/byzantine.py [--rounds 30]

The problem is the tests' heterogeneous fit (5 clients, client m owns the m-th fifth
of [0, 1] and fits sin(2πx) with a 1-6-6-1 MLP; error = MSE on a grid).  Client 0 is
the attacker; a hook rewrites its messages.  Each line: scenario, method options,
final MSE (or the one-line error that stopped the run) and the number of rejected
messages.  Options a version does not know are reported as such (to compare with
an older checkout).
"""
from __future__ import annotations

import argparse
import math

import torch

import fedsciml.methods  # noqa: F401  (registers the methods)
from fedsciml.runtime.loop import RoundFailed
from fedsciml.core.nn import MLP
from fedsciml.core.objective import PointwiseLeastSquares, ResidualPart
from fedsciml.methods import METHODS

NET = MLP([1, 6, 6, 1])


def _fit(theta, point):
    x, y = point
    return NET(theta, x) - y


def clients(K=5, n=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    objs = []
    for m in range(K):
        x = (m + torch.rand(n, 1, generator=gen, dtype=torch.float64)) / K
        objs.append(PointwiseLeastSquares([ResidualPart("data", _fit, (x, torch.sin(2 * math.pi * x[:, 0])))],
                                          NET.n_params))
    return objs


def evaluate(theta):
    x = torch.linspace(0, 1, 101, dtype=torch.float64).reshape(-1, 1)
    return {"mse": float(((NET(theta, x) - torch.sin(2 * math.pi * x[:, 0])) ** 2).mean())}


def scale(fields, c, who=(0,), after=0):
    def hook(rnd, cid, msg):
        if cid in who and rnd >= after:
            return {k: (v * c if k in fields else v) for k, v in msg.items()}
        return msg
    return hook


def claim(n, who=(0,), after=0):
    def hook(rnd, cid, msg):
        if cid in who and rnd >= after:
            return {**msg, "n": torch.full_like(msg["n"], n)}
        return msg
    return hook


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    objs = clients()
    theta0 = NET.init(0)
    avg = {"local_steps": 20, "lr": 1e-2, "rounds": args.rounds}
    robust = [("mean", {}), ("median", {"robust": "median"}), ("trimmed 0.2", {"robust": "trimmed", "trim": 0.2}),
              ("clip_norm 0.5", {"clip_norm": 0.5})]
    cases = []
    for name, opts in robust:
        cases.append(("fedavg honest", name, "fedavg", {**avg, **opts}))
    for name, opts in robust:
        cases.append(("fedavg: client 0 delta x1e6", name, "fedavg", {**avg, **opts, "message_hook": scale(("delta",), 1e6)}))
    cases += [
        ("fedavg: client 0 claims n=1e300", "mean", "fedavg", {**avg, "message_hook": claim(1e300)}),
        ("fedavg: client 0 claims n=1e15 from round 5", "mean", "fedavg", {**avg, "message_hook": claim(1e15, after=5)}),
        ("fedavg: clients 0,1 claim n=1e308", "mean", "fedavg", {**avg, "message_hook": claim(1e308, who=(0, 1))}),
        ("fipa honest (local gn, safeguard)", "default", "fipa", {"rounds": 15, "rank": 4}),
        ("fipa: client 0 delta x1e6", "default", "fipa", {"rounds": 15, "rank": 4, "message_hook": scale(("delta",), 1e6)}),
        ("fipa: client 0 reports loss x(-1)", "default", "fipa", {"rounds": 15, "rank": 4,
                                                                 "message_hook": scale(("loss",), -1.0)}),
        ("gn honest", "default", "gn", {"rounds": 15}),
        ("gn: client 0 g x1e6", "default", "gn", {"rounds": 15, "form": "normal", "message_hook": scale(("g",), 1e6)}),
        ("gn: client 0 all fields x1e6 (consistent lie)", "default", "gn",
         {"rounds": 15, "form": "normal", "message_hook": scale(("g", "H", "loss"), 1e6)}),
    ]
    print(f"{'scenario':48s} {'options':14s} {'final MSE':>12s} {'rejected':>8s}")
    for scen, name, method, opts in cases:
        try:
            _, rows, info = METHODS[method](None, objs, theta0, evaluate, **opts)
            out, rej = f"{rows[-1]['mse']:.3g}", str(len(info.get("rejections", [])))
            if info.get("ignored_options"):
                out = "option unknown: " + ",".join(info["ignored_options"])
        except (RoundFailed, ValueError, OverflowError, RuntimeError) as e:
            out, rej = f"{type(e).__name__}: {str(e)[:150]}", "-"
        print(f"{scen:48s} {name:14s} {out:>12s} {rej:>8s}", flush=True)


if __name__ == "__main__":
    main()
