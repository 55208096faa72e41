#!/usr/bin/env python
"""Screen (issue 37): a federated Gauss–Newton step in 2 exchanges from the union of the clients' *local* Krylov
spaces, against K-FAC-preconditioned CG (≤ 10 iterations, one exchange per iteration in gn), on one harness.

Why: gn's default step (matrix-free CG preconditioned by K-FAC, capped at 10) keeps gn within 2× of centralized
LM at research scale but costs ~12 exchanges per accepted step; the ≤ 2-exchange steps measured so far (the damped
K-FAC step, the subspace step over [P⁻¹g, δ_{t−1}]) were 3.7–23× behind (reproductions/federated_scale.md).  What
CG's products buy is a Krylov space of the point's operator A = Σ_m J_mᵀJ_m.  Here each client builds a Krylov space
of its *own* operator M·A_m (≈ A when the points are split at random) with no exchange — a preconditioned CG on
(M·A_m + μI) δ = −g_start, k local products — and sends its k search directions; the server minimizes the damped
Gauss–Newton model exactly over the union V (Galerkin: (VᵀAV + μVᵀV) a = −Vᵀg), which needs one exchange of
products (V down, the small Gram (J_m V)ᵀ(J_m V) up).  A rejected trial re-solves the small system at the larger
μ with no exchange.

Variants (``--runs``):
  kfac-cg     the baseline: PCG on (A + μI)δ = −g with the pooled K-FAC factors, ≤ ``--cg`` iterations (in gn:
              1 exchange for the statistics + 1 per CG iteration per solve)
  union-g     clients start from the global g and precondition with the pooled K-FAC (needs g and the factors
              first: 3 exchanges per accepted step — statistics; the local directions; the Gram)
  union-loc   clients start from their own M·g_m and precondition with their own K-FAC factors ×M: the
              statistics and the directions come in one exchange, 2 per accepted step
(k = ``--k`` local CG iterations per client for both union variants.)

One harness for all: the same LM loop (Nielsen's μ update, gain ratio from the exact model decrease), the same
problem (``solve poisson --preset exp16``'s network, points and fresh draw every step, split at random among
``--clients``), solver CPU seconds at one thread (``time.process_time``, test evaluation excluded).  This is a
screen of the step, not the gn protocol: exchanges are counted by the rule above, not run.

    OMP_NUM_THREADS=1 python scripts/bench/krylov_union_screen.py --budget 120 --runs kfac-cg,union-loc
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedsciml.core.kfac_pinn import part_factors  # noqa: E402
from fedsciml.core.matfree import GNOperator  # noqa: E402
from fedsciml.problems import get_problem  # noqa: E402
from fedsciml.problems.registry import REGISTRY  # noqa: E402


RUNS = ("kfac-cg", "union-g", "union-loc")


class Client:
    """One client's linearization at θ (fedsciml's own matrix-free operator: the residual's pullback and its
    pullback, :class:`fedsciml.core.matfree.GNOperator`) and its K-FAC sums."""

    def __init__(self, obj, theta, net):
        self.op = GNOperator(obj.residual, theta)
        self.g = self.op.g
        self.loss = float(self.op.loss)
        self.fac = part_factors(net, theta, obj.parts)

    def Av(self, v):
        return self.op.matvec(v)

    def JV(self, V):  # [n_m, k], the columns one after another (vmap was slower on a CPU: GNOperator's docstring)
        return torch.stack([self.op.jv(V[:, j]) for j in range(V.shape[1])], 1)


def pcg(Av, b, mu, Pinv, iters):
    """Preconditioned CG on (A + μI)x = b from 0, ≤ iters; returns x, the search directions, the model value
    m(x) = −bᵀx + ½xᵀ(A+μI)x (b = −g) tracked without a product."""
    x = torch.zeros_like(b)
    r = b.clone()
    z = Pinv(r)
    d = z.clone()
    rz = float(r @ z)
    dirs = []
    for _ in range(iters):
        Ad = Av(d) + mu * d
        dAd = float(d @ Ad)
        if not dAd > 0:
            break
        a = rz / dAd
        dirs.append(d)
        x = x + a * d
        r = r - a * Ad
        z = Pinv(r)
        rz_new = float(r @ z)
        if rz_new <= 1e-30 * max(rz, 1e-300):
            break
        d = z + (rz_new / rz) * d
        rz = rz_new
    return x, dirs, r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--preset", default="exp16")
    ap.add_argument("--budget", type=float, default=120.0, help="solver CPU seconds per run")
    ap.add_argument("--runs", default="kfac-cg,union-loc")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--cg", type=int, default=10, help="kfac-cg's CG cap")
    ap.add_argument("--k", type=int, default=10, help="local CG iterations per client (union variants)")
    ap.add_argument("--marks", default="30,60,120")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    runs = [r.strip() for r in a.runs.split(",") if r.strip()]
    bad = [r for r in runs if r not in RUNS]
    if bad or not runs:
        ap.error(f"--runs {a.runs!r}: unknown {', '.join(bad) or '(none given)'}; allowed: {', '.join(RUNS)}")
    if a.k < 1 or a.cg < 1 or a.clients < 1 or not a.budget > 0:
        ap.error(f"--k, --cg and --clients must be ≥ 1 and --budget > 0, got {a.k}, {a.cg}, {a.clients}, {a.budget}")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    opts = dict(REGISTRY["poisson"].presets[a.preset].problem)
    pb = get_problem("poisson", **opts)
    net = pb.network()
    marks = [float(m) for m in a.marks.split(",")]
    out = {}
    for run in runs:
        theta = pb.init_params(a.seed)
        M = a.clients
        mu = None
        nu = 2.0
        cpu = 0.0
        hist = [(0.0, pb.evaluate(theta)["rel_l2"], 0)]
        exch = acc = rej = 0
        step = 0
        while cpu < a.budget:
            t0 = time.process_time()
            objs = pb.client_objectives(M, seed=a.seed * 100_003 + step + 1)
            cl = [Client(o, theta, net) for o in objs]
            g = sum(c.g for c in cl)
            L = sum(c.loss for c in cl)
            fac = cl[0].fac
            for c in cl[1:]:
                fac = fac + c.fac
            if mu is None:
                mu = 1e-3 * float(fac.lambda_max())
            exch += 1  # the statistics (loss, g_m, factors) at θ on the round's points

            def Av(v):
                return sum(c.Av(v) for c in cl)

            basis = None
            accepted = False
            for _trial in range(20):
                if run == "kfac-cg":
                    Pinv = fac.inverse(mu)
                    x, dirs, r = pcg(Av, -g, mu, Pinv, a.cg)
                    exch += len(dirs)
                    m_damped = 0.5 * float(-g @ x - r @ x) + float(g @ x)  # gᵀx + ½xᵀ(A+μI)x
                    pred = -(m_damped - 0.5 * mu * float(x @ x))
                    delta = x
                else:
                    if basis is None:
                        cols = []
                        for c in cl:
                            if run == "union-g":
                                Pinv, start = fac.inverse(mu), -g
                            else:
                                Pinv, start = _scaled_inverse(c.fac, M, mu), -M * c.g
                            _, dirs, _ = pcg(lambda v, c=c: M * c.Av(v), start, mu, Pinv, a.k)
                            cols += dirs
                        if run == "union-loc":
                            cols += [c.g for c in cl]  # span ⊇ g = Σ g_m
                        V = torch.stack(cols, 1)
                        Q, R = torch.linalg.qr(V)
                        keep = R.diagonal().abs() > 1e-10 * R.diagonal().abs().max()
                        Q = Q[:, keep]
                        G = sum((lambda W: W.T @ W)(c.JV(Q)) for c in cl)
                        G = 0.5 * (G + G.T)
                        bq = -(Q.T @ g)
                        basis = (Q, G, bq)
                        exch += 1 if run == "union-loc" else 2  # (union-loc's directions came with the statistics)
                    Q, G, bq = basis
                    aa = torch.linalg.solve(G + mu * torch.eye(G.shape[0]), bq)
                    delta = Q @ aa
                    pred = float(bq @ aa) - 0.5 * float(aa @ (G @ aa))
                trial = theta + delta
                with torch.no_grad():
                    Lt = sum(float(o.loss(trial)) for o in objs)
                rho = (L - Lt) / pred if pred > 0 else -1.0
                if rho > 1e-4 and math.isfinite(Lt):
                    theta = trial
                    mu *= max(1 / 3, 1 - (2 * rho - 1) ** 3)
                    nu = 2.0
                    acc += 1
                    accepted = True
                    break
                rej += 1
                exch += 1  # the trial's loss
                mu *= nu
                nu *= 2
            cpu += time.process_time() - t0
            step += 1
            hist.append((cpu, pb.evaluate(theta)["rel_l2"], step))
            if not accepted:
                break
        at = {m: next((h[1] for h in reversed(hist) if h[0] <= m), None) for m in marks}
        out[run] = {"at": at, "accepted": acc, "rejected": rej, "exchanges": exch, "cpu_s": cpu,
                    "exchanges_per_accepted": exch / max(acc, 1), "history": hist}
        print(f"{run:10s} " + " ".join(f"@{m:g}: {v:.3e}" if v is not None else f"@{m:g}: —" for m, v in at.items())
              + f"  accepted {acc} rejected {rej} exchanges {exch} ({exch / max(acc, 1):.1f}/accepted) "
                f"cpu {cpu:.0f} s", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "runs": out}, indent=1))
    return 0


def _scaled_inverse(fac, M, mu):
    """The inverse of a client's own K-FAC factors scaled to the pooled size (M·F_m ≈ F), damped by μ."""
    return lambda v: fac.inverse(mu / M)(v) / M


if __name__ == "__main__":
    sys.exit(main())
