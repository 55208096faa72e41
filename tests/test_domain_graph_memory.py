"""Issue 38.4 (left open): the memory estimate of a DomainPDE's matrix-free operator covers the graph it builds.

The kfac helper measured heat with the 5×100 network and 8,120 rows at 3.1–4.0 GB of peak RSS against an estimate
of 0.84 GB: the forward-Laplacian fit (``5·(d_in + 2)·Σ hidden`` floats a row) was made for the zoo's Poisson
residuals, and a DomainPDE's nested autodiff keeps more.  Here a small case is measured in a fresh process (one
thread): the peak-RSS increase (``ru_maxrss``) of building the operator and two products over the built problem,
then of the Taylor-mode K-FAC factors while it lives (``scripts/bench/domain_graph_memory.py --one``).  The
driver's estimate must be an upper bound of each and within 3× of it (measured 1.3× and 1.4× here; the fit before
gave 0.6× of the operator alone).  Peak RSS is the allocator's view, so the bounds are wide, not a tolerance."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_estimate_bounds_a_measured_domain_pde_operator_and_its_kfac_pass():
    # a clean environment: what earlier tests of the session set (threads, allocator, plotting) must not change it
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": ROOT}
    runs = []
    for _ in range(3):  # peak RSS on a shared machine: a run whose pages were reclaimed reads low; the largest counts
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench", "domain_graph_memory.py"), "--one",
                            "heat:64,64,64:1500"], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        if runs[-1]["floats_per_row"] * 8 * runs[-1]["rows"] > 100e6:  # measured 0.13–0.15 GB when undisturbed
            break
    d = max(runs, key=lambda x: x["floats_per_row"])
    operator = d["floats_per_row"] * 8 * d["rows"]                       # bytes the operator and its products kept
    both = (d["floats_per_row"] + d["kfac_floats_per_row"]) * 8 * d["rows"]  # and the K-FAC factor pass
    assert operator > 50e6, d  # a signal well above the allocator's noise (measured 0.15 GB)
    assert operator <= d["estimate_gb"] * 1e9 <= 3 * operator, d       # precond nystrom: the operator only
    assert both <= d["estimate_kfac_gb"] * 1e9 <= 3 * both, d           # precond kfac: the factor pass too
    assert d["fit_per_pde_row"] * 8 * d["pde_rows"] < operator  # the forward-Laplacian fit alone was below it


def test_heat_with_pinnacles_network_is_estimated_at_what_was_measured():
    """heat, 5×100, 8,120 rows: whole K-FAC runs peaked at 3.1–4.0 GB (0.39 GB of it the interpreter);
    the estimate was 0.84 GB and is now 3.8 GB (2.3 GB with the Nyström preconditioner, which skips the K-FAC
    pass)."""
    import fedsciml.methods  # noqa: F401  (the methods' registry)
    from fedsciml.problems import get_problem
    from fedsciml.runtime.driver import estimate_memory, plan

    pb = get_problem("heat", n_interior=8000, hidden=[100] * 5)
    got = {}
    for precond in ("auto", "nystrom"):
        p = plan(pb, "centralized", clients=1, lm_solve="matfree", precond=precond)
        got[precond], how = estimate_memory(pb, 1, p.config, "centralized")
        assert "nested autodiff" in how
    assert 3.6e9 - 0.39e9 <= got["auto"] <= 2 * (3.1e9 - 0.39e9) and 2.0e9 <= got["nystrom"] < got["auto"]
    nd = get_problem("heat-nd", n_interior=1000, hidden=[32] * 3)  # the one-pass forward residual: the old fit
    assert nd.nested_graph_floats() is None
