"""What the matrix-free Gauss–Newton operator of a DomainPDE holds per residual row, measured, against the driver's
estimate (issue 38.4: heat with the 5×100 network and 8,120 rows measured 3–4 GB against an estimate of 0.84 GB).

Each case runs in a fresh process at one thread: the problem and its one client's objective are built (the
baseline: the resident set then), then the operator (``GNOperator``: r, Jᵀr and the residual's vjp graph) and two
products ``JᵀJv`` (the first builds the Jv graph).  Printed per case: rows (PDE rows), Σ hidden, the peak-RSS
increase over the baseline in floats per row (8-byte), what :func:`fedsciml.core.matfree.graph_floats_per_row`
and the problem's own :meth:`nested_graph_floats` say for a PDE row, and the driver's whole estimate against the
measured peak; then the same with the Taylor-mode K-FAC factors computed while the operator lives (``KFAC=0``: not).  Usage::

    OMP_NUM_THREADS=1 python scripts/bench/domain_graph_memory.py                 # the default cases
    OMP_NUM_THREADS=1 python scripts/bench/domain_graph_memory.py heat:100,100,100,100,100:8000
    PINNACLE_DIR=~/PINNacle OMP_NUM_THREADS=1 python scripts/bench/domain_graph_memory.py pinnacle/ks:100,100,100,100,100:1024
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

CASES = ["heat:50,50,50:1000", "heat:50,50,50:4000", "heat:100,100,100,100,100:2000",
         "heat-nd:32,32,32:1000", "kovasznay:50,50,50,50:1500", "burgers:100,100,100:2000"]


def _now() -> float:
    """The resident set now (``/proc/self/statm``): the baseline — the peak before it may hold a transient of
    building the problem that would hide part of the operator's increase."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * float(os.sysconf("SC_PAGE_SIZE"))


def _peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0  # kB on Linux


def one(case: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from fedsciml.core.matfree import GNOperator, graph_floats_per_row
    from fedsciml.methods.gn import GNConfig
    from fedsciml.problems import get_problem
    from fedsciml.runtime.driver import estimate_memory

    name, hidden, n = case.split(":")
    sizes = [int(h) for h in hidden.split(",")]
    if name.startswith("pinnacle/"):  # a PINNacle case: pinnacle/ks (the checkout from $PINNACLE_DIR)
        pb = get_problem("pinnacle", case=name.split("/", 1)[1], pinnacle_dir=os.environ.get("PINNACLE_DIR"),
                         n_interior=int(n), hidden=sizes)
    else:
        pb = get_problem(name, n_interior=int(n), hidden=sizes)
    (obj,) = pb.client_objectives(1, seed=0)
    theta = pb.init_params(0)
    rows, pde = int(obj.n_residuals), int(pb.pde_rows_per_client(1))
    import gc

    gc.collect()
    base = _now()
    op = GNOperator(obj.residual, theta)
    v = torch.randn(theta.numel(), dtype=theta.dtype, generator=torch.Generator().manual_seed(0))
    op.matvec(v)
    op.matvec(v)
    peak = _peak()
    kfac = None
    if os.environ.get("KFAC", "1") == "1":  # the Taylor-mode K-FAC factors, while the operator lives
        from fedsciml.core import kfac_forms

        kfac_forms.factors_of(obj, theta)
        kfac = _peak()
    d_in = int(pb.network().sizes[0])
    own = getattr(pb, "nested_graph_floats", None)
    est = estimate_memory(pb, 1, GNConfig(form="matfree", precond="nystrom"), "gn")
    est_k = estimate_memory(pb, 1, GNConfig(form="matfree", precond="kfac"), "gn")
    return {"case": case, "rows": rows, "pde_rows": pde, "p": int(theta.numel()), "sum_hidden": sum(sizes),
            "d_in": d_in, "base_gb": base / 1e9, "peak_gb": peak / 1e9,
            "floats_per_row": (peak - base) / 8.0 / rows,
            "fit_per_pde_row": graph_floats_per_row(d_in, sizes),
            "own_per_pde_row": own("nystrom") if callable(own) else None,
            "estimate_gb": None if est is None else est[0] / 1e9,
            "kfac_floats_per_row": None if kfac is None else (kfac - peak) / 8.0 / rows,
            "peak_kfac_gb": None if kfac is None else kfac / 1e9,
            "estimate_kfac_gb": None if est_k is None else est_k[0] / 1e9}


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2])))
        return 0
    cases = sys.argv[1:] or CASES
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"{'case':<34} {'rows':>6} {'pde':>6} {'Σh':>5} {'base GB':>8} {'peak GB':>8} {'floats/row':>11} "
          f"{'fit/PDE row':>11} {'own/PDE row':>11} {'estimate GB':>11} {'K-FAC f/row':>11} {'peak K GB':>9} "
          f"{'est. K GB':>9}")
    for case in cases:
        r = subprocess.run([sys.executable, __file__, "--one", case], capture_output=True, text=True, env=env)
        if r.returncode:
            print(f"{case}: failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        own = "—" if d["own_per_pde_row"] is None else f"{d['own_per_pde_row']:,.0f}"
        print(f"{d['case']:<34} {d['rows']:>6} {d['pde_rows']:>6} {d['sum_hidden']:>5} {d['base_gb']:>8.2f} "
              f"{d['peak_gb']:>8.2f} {d['floats_per_row']:>11,.0f} {d['fit_per_pde_row']:>11,.0f} {own:>11} "
              f"{d['estimate_gb']:>11.2f} {d['kfac_floats_per_row'] or 0:>11,.0f} {d['peak_kfac_gb'] or 0:>9.2f} "
              f"{d['estimate_kfac_gb']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
