"""Central-DP one-shot ridge through Flower's SecAgg+: the server sees only the masked sum of the sites' noised
statistics.

fedsciml's generic Flower App (:mod:`fedsciml.engines.flower.apps`) carries fedsciml's own query messages, which
Flower's secure aggregation does not handle: ``secaggplus_mod`` and ``SecAggPlusWorkflow`` work on the legacy
*fit* flow (``FitIns``/``FitRes`` with ``Parameters``).  So central DP runs in its own ServerApp/ClientApp pair,
all public Flower API (``flwr.server.LegacyContext``, ``flwr.server.workflow.DefaultWorkflow`` and
``SecAggPlusWorkflow``, ``flwr.client.mod.secaggplus_mod``, ``NumPyClient``), started as a Flower App of its
own (``fedsciml/engines/flower/secagg_app``; ``--engine flower`` picks it for ``one-shot`` with ``dp_central``):

1. **The site** (:class:`SiteShareClient`, its ``fit``) computes its one-shot message exactly as in process —
   rows clipped, statistics ``(pack(G_k), g_k = −h_k)`` (:func:`fedsciml.methods.oneshot.client_statistics`) —
   and adds its **share of the noise**, ``N(0, s²/t)`` per entry from its own generator
   (:func:`fedsciml.core.dp.share_std`, :func:`~fedsciml.core.dp.client_generator`); it returns the flat
   vector as its "parameters" with ``num_examples = 1``.  It refuses (its fit raises; the run then fails, see
   below) if it holds more rows than the public bound ``max_rows`` or if an entry exceeds the fixed-point range.
2. **SecAgg+** (``secaggplus_mod`` on the site, ``SecAggPlusWorkflow`` at the server) quantizes each vector,
   masks it, and gives the server only the sum.  What Flower 1.41 computes (read from its source,
   ``flwr/client/mod/secure_aggregation/secaggplus_mod.py`` and ``flwr/server/workflow/secure_aggregation/
   secaggplus_workflow.py``): the site multiplies its vector by ``q/T`` with ``q = round(num_examples /
   max_weight · T)``; with ``num_examples = max_weight = 1`` that factor is exactly 1.  It then clips to
   ``[−c, c]`` (``clipping_range``; our sites refuse instead of being clipped), maps ``x ↦ (x + c)·T/(2c)``
   and rounds stochastically to an int32 (``T = quantization_range``), prepends ``q = T``, adds masks modulo
   ``M = modulus_range = 2³²``.  The server sums modulo M, removes the masks, and returns
   ``(Σq·2c/T − K'c)·T/Σq`` — the **average** over the ``K'`` sites that sent a masked vector, weighted by the
   ``q``s, all equal here.  We multiply it by ``K'`` (the number of fit results): the sum.
3. **Fixed point** (:mod:`fedsciml.core.dp`): ``c`` = :func:`~fedsciml.core.dp.statistics_bound` (``max_rows·C_a·
   max(C_a, C_b)`` plus ten noise-share deviations), ``T`` = :func:`~fedsciml.core.dp.quantization_range`
   (the largest with ``K·T < M`` and ``T < 2³¹``: nothing wraps); each entry of the sum is within
   :func:`~fedsciml.core.dp.secure_sum_error_bound` ``K'·2c/T + 16·K'·c·2⁻⁵²`` of the float64 sum
   (4.2e-6 at c = 1000, K' = K = 3), and the model within :func:`~fedsciml.core.dp.model_error_bound`; the Result
   reports both (``secagg_entry_bound``, ``secagg_model_bound``).
4. **The server** fuses only the sum (:meth:`fedsciml.methods.oneshot.OneShotStrategy.fuse_sum`: PSD repair,
   noise-aware σ, solve) — the same code as the in-process run, whose sites draw the same shares, so the two
   models agree to the bound.

**Dropouts.**  Each share is sized for ``t`` sites (``dp_min_survivors``, default every site): the sum of the
``K' ≥ t`` shares that arrive carries ``s·√(K'/t) ≥ s``.  With ``K' < t`` (or SecAgg+ halting because too few
sites remain to unmask) the run fails with one line and releases nothing (:func:`fedsciml.core.dp.check_survivors`).
SecAgg+'s reconstruction threshold is ``max(2, t)`` shares.  The fixed-point range is sized for all ``K`` sampled
sites, so the sum of any ``K' ≤ K`` never wraps.

**What of the driver this App uses, and what it cannot.**  The job is checked by :func:`plan` (the one-shot
configuration from the job's options, the public fixed-point plan); the server's fusion is the strategy's public
interface (:meth:`~fedsciml.methods.oneshot.OneShotStrategy.size_noise_shares`,
:meth:`~fedsciml.methods.oneshot.OneShotStrategy.request_transform`,
:meth:`~fedsciml.methods.oneshot.OneShotStrategy.fuse_sum`,
:attr:`~fedsciml.methods.oneshot.OneShotStrategy.fused_system`, ``info()``); the Result is the driver's
(:func:`fedsciml.runtime.driver.run_result`, built by its one constructor ``make_result``).  The round itself is not the driver's
(:func:`fedsciml.runtime.driver.run_connected`): Flower's SecAgg+ runs only in its legacy *fit* workflow, which
hands the server one masked sum, never a reply per client, while fedsciml's round loop validates each client's
reply before the strategy fuses them (``Exchange.validate`` → ``aggregate_round``).  Driving it through the loop
would need a transport whose exchange returns a sum in place of replies — a secure sum of fedsciml's own over
the generic App, which this project does not write (Flower's SecAgg+ stays the only secure aggregation).  So the
App runs SecAgg+'s workflow itself and fuses the sum with :meth:`fuse_sum`; the job's problem is taken as given
(a job from ``fs.solve`` or ``ridge --engine flower`` was planned by the driver before it was sent).

**Audit.**  A job with ``audit=PATH`` wraps the Grid (:class:`AuditGrid`, public ``Grid`` interface) and writes
every masked vector the server received (npz, one array per node): what the server saw of each site.
"""
from __future__ import annotations

import json
import logging
import math
import time

import numpy as np
import torch

import fedsciml.engines.flower  # noqa: F401  (telemetry / update check off before flwr is imported)
from fedsciml.engines.flower.jobs import SECAGG_APP_DIR as APP_DIR  # noqa: F401  (the Flower App of this pair)
from fedsciml.engines.flower.jobs import SECAGG_METHOD, _default_max_rows, is_secagg_job, plan  # noqa: F401  (light: no flwr)

log = logging.getLogger(__name__)


# --- the site -------------------------------------------------------------------------------------------------


def site_vector(client, theta0: torch.Tensor, pl: dict) -> np.ndarray:
    """Site ``client``'s flat message ``[pack(G_k + E_k), g_k − e_k]`` (clipped statistics plus its noise share),
    checked against the public bounds (one line naming the site otherwise)."""
    from fedsciml.methods.oneshot import client_statistics

    obj = client.objective
    if obj.n_residuals > pl["max_rows"]:
        raise ValueError(f"site {client.cid} holds {obj.n_residuals} rows, more than the public bound "
                         f"dp_max_rows={pl['max_rows']} that fixes SecAgg+'s fixed-point range; it sends nothing")
    with torch.no_grad():
        r, J = obj.residual_and_jacobian(theta0)
    msg = client_statistics(r, J, client.cid, pl["transform"])
    flat = torch.cat([msg["H"], msg["g"]]).detach().cpu().numpy().astype(np.float64)
    big = float(np.abs(flat).max()) if flat.size else 0.0
    if not big <= pl["clipping_range"]:
        raise ValueError(f"site {client.cid}: an entry of its statistics ({big:.6g}) exceeds SecAgg+'s clipping "
                         f"range {pl['clipping_range']:.6g}; it sends nothing rather than be clipped")
    return flat


def _make_site_client(node_config):
    from flwr.client import NumPyClient

    class SiteShareClient(NumPyClient):
        """One site: its ``fit`` answers with its clipped, share-noised statistics (:func:`site_vector`)."""

        def fit(self, parameters, config):
            from fedsciml.engines.flower.apps import _client, failure_reason, set_node_threads

            pid = node_config.get("partition-id") if hasattr(node_config, "get") else None
            try:
                job, pl = json.loads(str(config["job"])), json.loads(str(config["plan"]))
                set_node_threads(node_config)  # the node's own thread count, never the job's
                client = _client(job, int(pid), node_config)
                p = client.objective.n_params
                theta0 = (torch.as_tensor(np.asarray(parameters[0], dtype=np.float64)) if parameters and
                          np.asarray(parameters[0]).size else torch.zeros(p, dtype=torch.float64))
                return [site_vector(client, theta0, pl)], 1, {}
            except Exception as e:  # noqa: BLE001 - Flower sends the message to the server: a reason code and the
                # node's own one line, never a file's content
                raise RuntimeError(failure_reason(pid, e)) from None

    return SiteShareClient()


def client_fn(context):
    return _make_site_client(context.node_config).to_client()


# --- the server -----------------------------------------------------------------------------------------------


def _sum_strategy(theta0: np.ndarray, K: int, fit_config: dict, wait_s: float):
    from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import Strategy

    class SumStrategy(Strategy):
        """Samples all K sites once, sends θ₀ and the plan; keeps the (SecAgg+) aggregate and the count."""

        def __init__(self):
            self.mean = None
            self.arrived = 0
            self.failures: list = []

        def initialize_parameters(self, client_manager):
            return ndarrays_to_parameters([theta0])

        def configure_fit(self, server_round, parameters, client_manager):
            if not client_manager.wait_for(K, timeout=int(math.ceil(wait_s))):
                raise RuntimeError(f"SecAgg+: fewer than {K} sites connected within {wait_s:.0f} s")
            return [(c, FitIns(parameters, dict(fit_config))) for c in client_manager.sample(K)]

        def aggregate_fit(self, server_round, results, failures):
            self.failures = list(failures)
            self.arrived = len(results)
            if results:
                self.mean = parameters_to_ndarrays(results[0][1].parameters)[0]
            return None, {}

        def configure_evaluate(self, server_round, parameters, client_manager):
            return []

        def aggregate_evaluate(self, server_round, results, failures):
            return None, {}

        def evaluate(self, server_round, parameters):
            return None

    return SumStrategy()


def _audit_grid(grid, records: dict):
    """``grid`` wrapped (Flower's public ``Grid`` interface) so that every masked vector a site sends in SecAgg+'s
    'collect masked vectors' stage is recorded: ``records[node_id] = the int64 array the server received``."""
    from flwr.common import bytes_to_ndarray
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
    from flwr.serverapp import Grid

    class AuditGrid(Grid):
        def set_run(self, run):  # pragma: no cover - the ServerApp's grid is set up already
            return grid.set_run(run)

        @property
        def run(self):
            return grid.run

        def create_message(self, *a, **kw):
            return grid.create_message(*a, **kw)

        def get_node_ids(self):
            return grid.get_node_ids()

        def push_messages(self, messages):
            return grid.push_messages(messages)

        def pull_messages(self, message_ids):
            return grid.pull_messages(message_ids)

        def send_and_receive(self, messages, *, timeout=None):
            out = list(grid.send_and_receive(messages, timeout=timeout))
            for m in out:
                if m.has_error() or RECORD_KEY_CONFIGS not in m.content.config_records:
                    continue
                cfg = m.content.config_records[RECORD_KEY_CONFIGS]
                if Key.MASKED_PARAMETERS in cfg:
                    arrs = [bytes_to_ndarray(b) for b in cfg[Key.MASKED_PARAMETERS]]
                    records[int(m.metadata.src_node_id)] = np.concatenate([a.reshape(-1) for a in arrs])
            return out

    return AuditGrid()


def unpack_sum(vec: np.ndarray) -> tuple[int, torch.Tensor, torch.Tensor]:
    """``(m, pack(ΣH) [m(m+1)/2], Σg [m])`` from the flat sum of length ``m(m+1)/2 + m``."""
    L = int(vec.size)
    m = int(round((math.sqrt(9 + 8 * L) - 3) / 2))
    if m * (m + 1) // 2 + m != L:
        raise ValueError(f"the secure sum has {L} entries, not m(m+1)/2 + m for any m")
    t = torch.as_tensor(np.asarray(vec, dtype=np.float64))
    return m, t[: L - m].clone(), t[L - m:].clone()


def run_secagg_job(grid, job: dict, context):
    """One central-DP one-shot job through SecAgg+ on ``grid``; returns its Result (θ, the bounds, who arrived)."""
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    from fedsciml.core import dp as _dp
    from fedsciml.methods.oneshot import OneShotStrategy
    from fedsciml.problems import get_problem
    from fedsciml.runtime.driver import Plan, get_method, run_result

    if not is_secagg_job(job):
        raise ValueError("the SecAgg+ App runs one-shot with dp_central at a finite dp_epsilon only; run other "
                         "jobs with fedsciml's generic App (fedsciml/engines/flower/app)")
    problem = get_problem(job["problem"], **job.get("problem_options", {}))
    pl = plan(job, problem)
    K, seed = pl["clients"], pl["seed"]
    if hasattr(problem, "client_data"):  # a zoo ridge problem's test set is drawn with the clients' split
        torch.manual_seed(seed)
        problem.client_data(K, seed=seed)
    if getattr(problem, "name", None) == "table" and not problem.paths:
        theta0 = np.zeros(0)  # the sites know d; the server learns it from the sum's length
    else:
        theta0 = problem.init_params(seed).detach().cpu().numpy()
    wait_s = float(job.get("connect_timeout", 300.0))
    strategy = _sum_strategy(theta0, K, {"job": json.dumps(_site_job(job)), "plan": json.dumps(pl)}, wait_s)
    t = pl["survivors"]
    workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
        num_shares=1.0, reconstruction_threshold=max(2, t), max_weight=1.0, clipping_range=pl["clipping_range"],
        quantization_range=pl["quantization_range"], modulus_range=pl["modulus_range"],
        timeout=float(job.get("timeout", 300.0))))
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=1), strategy=strategy)
    records: dict = {}
    g = _audit_grid(grid, records) if job.get("audit") else grid
    t0 = time.perf_counter()
    workflow(g, legacy)
    wall = time.perf_counter() - t0
    eps = pl["dp"]["epsilon"]
    if strategy.mean is None:
        why = "; ".join(str(f) for f in strategy.failures)[:400] or "SecAgg+ halted (too few sites to unmask)"
        raise ValueError(f"central DP through SecAgg+: no sum was released ({why}); ε={eps} needs at least "
                         f"{t} sites' noise shares")
    if strategy.failures:
        log.warning("SecAgg+: %d site(s) failed: %s", len(strategy.failures),
                    "; ".join(str(f) for f in strategy.failures)[:400])
    arrived = int(strategy.arrived)
    total = np.asarray(strategy.mean, dtype=np.float64) * arrived  # SecAgg+ averages with equal weights: ×K'
    m, Hp, gsum = unpack_sum(total)
    st = OneShotStrategy(pl["sigma"], dp=pl["dp"], seed=seed, min_survivors=t, secure_sum=True,
                         fit_intercept=pl["fit_intercept"])
    st.size_noise_shares(K)
    d = m - 1 if st.fit_intercept else m  # the sum's last coordinate is the intercept's constant column
    if theta0.size == 0:
        theta0 = np.zeros(d)
    theta = torch.as_tensor(theta0, dtype=torch.float64)
    st.theta = theta
    theta = theta + st.fuse_sum(Hp, gsum, arrived, d)  # refuses K' < t (ε not delivered)
    entry = _dp.secure_sum_error_bound(arrived, pl["clipping_range"], pl["quantization_range"])
    sigma_used = st.noise["sigma_used"]
    step = theta - torch.as_tensor(theta0, dtype=torch.float64)
    if st.fused_system is not None:  # an unpenalized intercept: the system's smallest eigenvalue, less d·B (Weyl)
        step = torch.cat([step, torch.tensor([st.intercept / st_kappa(st, m)], dtype=torch.float64)])
        lam = float(torch.linalg.eigvalsh(st.fused_system)[0]) - m * entry
    else:
        lam = sigma_used
    model_bound = _dp.model_error_bound(m, step, lam, entry) if st.repair else math.inf
    if job.get("audit"):
        import io

        from fedsciml.runtime.files import write_bytes

        buf = io.BytesIO()
        np.savez(buf, **{str(k): v for k, v in records.items()})
        write_bytes(str(job["audit"]), buf.getvalue(), what="the audit file")
    info = {**st.info(), "secure_sum": "SecAgg+", "arrived": arrived, "clients": K, "secagg": {
        k: pl[k] for k in ("survivors", "max_rows", "clipping_range", "quantization_range", "modulus_range",
                           "share_std")}, "secagg_entry_bound": entry, "secagg_model_bound": model_bound,
        "engine": {"name": "flower", "app": "secagg"}}
    L = int(total.size)
    rows = [{"step": 1, "round": 1, "loss": math.nan, "floats_up": arrived * L, "floats_down": K * int(theta0.size),
             "floats_sent": arrived * L + K * int(theta0.size), "wall": wall}]
    # the driver's one Result constructor; the job was checked by plan(job, problem) above (its configuration
    # from the same options), so the Plan is the record of what ran, on engine flower
    spec = get_method(SECAGG_METHOD)
    p = Plan(problem, SECAGG_METHOD, spec, spec.make_config(dict(job.get("options", {}))), K, seed, torch.device("cpu"),
             "cpu", "flower", False, 10, None, {})
    return run_result(p, K, theta, rows, info, wall, {})


def st_kappa(st, m: int) -> float:
    """The constant column ``κ`` of an intercept under DP (``m`` = the fused dimension, features + 1)."""
    from fedsciml.methods.oneshot import intercept_column

    return intercept_column(st.dp["c_a"], m - 1)


def _site_job(job: dict) -> dict:
    """What a site needs to build its client (:func:`fedsciml.engines.flower.apps._client`): the problem, its
    options, the number of clients, the seed, the thread count."""
    return {"problem": job["problem"], "options": dict(job.get("problem_options", {})), "clients": int(job["clients"]),
            "seed": int(job.get("seed", 0)), "device": "cpu", "threads": torch.get_num_threads()}


def serve(grid, run_config, context):
    """The SecAgg+ ServerApp's main: the run config's job(s) (:func:`fedsciml.engines.flower.apps.job_from_run_config`
    and its ``jobs`` file), each through :func:`run_secagg_job`; results written where ``out`` says."""
    from fedsciml.engines.flower.resultio import write_result
    from fedsciml.engines.flower.runconfig import jobs_of
    from fedsciml.runtime.results import summary_lines

    jobs = jobs_of(run_config)  # every job checked (types, ranges, options, out) before the first one runs
    for j in jobs:
        res = run_secagg_job(grid, j, context)
        if j.get("table", True):
            for line in summary_lines([res]):
                log.info("%s", line)
        if j.get("out"):  # the directory `solve --out` writes (result, history, model)
            from fedsciml.problems import get_problem

            write_result(res, str(j["out"]), get_problem(j["problem"], **j.get("problem_options", {})))


def _make_apps():
    from flwr.client.mod import secaggplus_mod
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    capp = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])
    sapp = ServerApp()

    @sapp.main()
    def main(grid, context):
        from fedsciml.engines.flower.apps import _app_logging

        _app_logging()
        serve(grid, context.run_config, context)

    return capp, sapp


try:
    client_app, server_app = _make_apps()
except ImportError:  # flwr is not installed
    client_app = server_app = None
