"""One-shot fusion of Gauss–Newton statistics as a one-round :class:`~fedsciml.federated.strategy.Strategy`.

Round 1 asks the sampled clients (participation, then dropout: a client that
does not answer is simply absent from the fusion) for their Gauss–Newton
statistics at the broadcast θ₀ — the ``gn_stats`` query and schema of
:mod:`fedsciml.federated.gn`, ``{"H": pack(J_mᵀJ_m), "g": J_mᵀr_m, "loss", "n"}`` —
sums them (:meth:`~fedsciml.federated.gn.GNAggregator.aggregate_stats`) and
takes one damped Gauss–Newton step

    θ₁ = θ₀ − (ΣH_m + σI)⁻¹ Σg_m

with :func:`fedsciml.ridge.stats.ridge_solve` (Cholesky, a clear
``SingularGram`` error when the fused Gram is singular).  For the linear
residual ``r = A w − b`` at ``w = 0`` this *is* one-shot ridge fusion
(``H = AᵀA = G``, ``g = −Aᵀb = −h``): the ridge problems carry their penalty
σ as residual rows, so ``sigma`` here is extra damping (default 0), and the
result equals exact federated GN's first round (whose first LM damping is 0
for linear residuals).  Then the run stops (``stopped_by="one-shot"``).
"""
from __future__ import annotations

from fedsciml.federated.gn import GNAggregator
from fedsciml.federated.strategy import Exchange, Replies, Strategy
from fedsciml.federated.transport import Request


class OneShotStrategy(Strategy):
    """One exchange of GN statistics, one fused step (see the module docstring)."""

    name = "one-shot"

    def __init__(self, sigma: float = 0.0):
        from fedsciml.ridge.stats import check_sigma

        self.sigma = check_sigma(sigma)
        self.theta = None
        self.loss_sum = None
        self.fused = 0

    def configure_round(self, run, k):
        answering, _dropped = run.sample()  # nobody answering fails the round in aggregate_round
        theta = self.theta
        p = theta.numel()
        agg = GNAggregator(True, "normal")
        return Exchange(answering, Request("gn_stats", {"theta": theta}, {"form": "normal"}),
                        lambda m: agg.validate(m, p, theta.dtype))

    def aggregate_round(self, run, k, replies: Replies):
        from fedsciml.ridge.stats import ridge_solve

        if not replies.ok:
            run.fail("the one-shot fusion")
        p = self.theta.numel()
        st = GNAggregator(True, "normal").aggregate_stats(replies.ok, p)
        self.theta = self.theta + ridge_solve(st.H, -st.g, self.sigma)
        self.fused = len(replies.ok)
        return {"answered": len(replies.ok)}

    def finished(self, run):
        return "one-shot" if run.round_index >= 1 else None

    def state_dict(self):
        return {"theta": self.theta, "fused": self.fused}

    def load_state_dict(self, d):
        self.theta, self.fused = d["theta"], int(d["fused"])

    def summary(self):
        return {"sigma": self.sigma}

    def info(self):
        return {"fused_clients": self.fused}
