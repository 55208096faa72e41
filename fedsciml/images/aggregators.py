"""Fisher-weighted aggregators for image classification, on the federated layer's
:class:`~fedsciml.methods.aggregators.Aggregator` interface and Schema validation.

FedAvg, FedProx and FIPA (thin-QR merge, Eq. 13) are used unchanged from
:mod:`fedsciml.methods.aggregators`; this module adds the methods whose
messages are model + Fisher summaries:

* :class:`FedFishAggregator` — multi-round; ``delta`` + diagonal empirical Fisher,
  Fisher-weighted delta as the pseudo-gradient of a server Adam step (:class:`ServerAdam`) or added directly;
  :class:`FedAvgAdamAggregator` is FedAvg with the same server Adam.
* :class:`FisherMergeAggregator` — one-shot ``Σ n_i F_i w_i / Σ n_i F_i`` with a fisher floor.
* :class:`FedFisherAggregator` — one-shot; minimizes ``½wᵀ(ΣF̄_i)w − (ΣF̄_i w_i)ᵀw``
  (``F̄_i = (n_i/N) F_i``, diagonal or K-FAC) with Adam from the FedAvg average,
  keeping the best checkpoint on the server validation set.
* :class:`RegMeanAggregator` — one-shot; per layer ``W = (Σ G̃_i)⁻¹ Σ G̃_i W_i`` with Gram
  matrices of layer inputs, off-diagonals scaled by α.
* :class:`FedBEnsAggregator` — one-shot; M modes per client with Laplace precisions,
  the mixture log-posterior of FedBEns Eq. 5 maximized per component from the
  median of the client modes; returns the ensemble ``[M, p]``.

A message's curvature is always the *mean-form* Fisher of its client
(``(1/n) Σ_n J_nᵀΛ_nJ_n``); sample counts ``n`` give the weights.  The schemas
declare what the curvature must satisfy: Fisher diagonals ≥ 0, K-FAC factors,
Gram matrices and dense Fisher blocks positive semidefinite (``psd="square"``,
:mod:`fedsciml.core.schema`), eigenvalues ≥ 0; a violating message is
rejected by name.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from fedsciml.core.curvature import Diagonal, LowRank, fipa_merge_lowrank
from fedsciml.methods.aggregators import Aggregator, FedAvgAggregator, FIPAAggregator
from fedsciml.core.schema import Field, Schema
from fedsciml.images.fisher import KFAC
from fedsciml.runtime import robust as _robust


class FIPAComplementAggregator(FIPAAggregator):
    """FIPA's thin-QR merge (Eq. 13) with the orthogonal-complement correction, for sketches
    whose truncated tail is kept as an isotropic floor.

    Client m's curvature is modelled as ``Ĥ_m = U_m(Λ_m − τ_m)U_mᵀ + τ_m I`` with τ_m its
    smallest retained eigenvalue (``tail=True``), so a direction outside client m's sketch
    still counts with curvature τ_m instead of 0.  Then ``Ĥ = Σ w_m Ĥ_m = Q K Qᵀ + β₀ I``
    with β₀ = Σ w_m τ_m, ``b = Σ w_m Ĥ_m Δ_m``, and the step ``γ Ĥ⁻¹ b`` is
    ``γ [Q (K + β₀I)⁻¹ Qᵀ b + (I − QQᵀ) b / β₀]`` — Eq. 13 plus the complement term, which is
    the τ-weighted FedAvg step there: :func:`fedsciml.core.curvature.fipa_merge_lowrank` with
    ``complement='tail'`` (the one thin-QR merge).  ``tail=False`` is plain Eq. 13 with β = ``beta_rel ·
    max_m w_m λ_max,m`` (the federated layer's :class:`FIPAAggregator`, unchanged), whose
    step lies inside the ≤ Σ r_m-dimensional sketch span.
    """

    name = "fipa"

    def __init__(self, beta_rel: float = 0.0, gamma: float = 1.0, tail: bool = True, **kw):
        if beta_rel < 0 or (not tail and beta_rel == 0):
            raise ValueError(f"FIPA beta_rel must be ≥ 0 (> 0 without the tail floor), got {beta_rel}")
        super().__init__(curvature="lowrank", merge="qr", beta=max(beta_rel, 1e-30), gamma=gamma,
                         weighting="samples", **kw)
        self.beta_rel, self.tail = beta_rel, tail

    def aggregate(self, theta, messages, server_round: int | None = None):
        if not messages:
            raise ValueError("no client messages to aggregate")
        w = self._weights(messages)
        msgs = list(messages.values())
        lam_max = max(wi * float(m["lam"].max()) for wi, m in zip(w, msgs))
        if not self.tail:
            self.beta = max(self.beta_rel * lam_max, torch.finfo(theta.dtype).tiny)
            return super().aggregate(theta, messages, server_round)
        taus = [float(m["lam"].min()) for m in msgs]
        beta0 = sum(wi * t for wi, t in zip(w, taus)) + self.beta_rel * lam_max
        deltas = [m["delta"] for m in msgs]
        if self.rule.clip_norm is not None:  # the robust options, as the federated layer's merge applies them
            deltas = list(_robust.clip_rows(torch.stack(deltas), self.rule.clip_norm))
        if not beta0 > 0:  # every sketch ends in a zero eigenvalue: no floor to speak of
            if self.rule.rule != "mean":
                return theta + sum(w) * _robust.RobustRule(self.rule.rule, self.rule.trim).combine(
                    torch.stack(deltas), w)
            return theta + sum(wi * d for wi, d in zip(w, deltas))
        curv = [LowRank.from_message(m) for m in msgs]
        step = fipa_merge_lowrank([c.U for c in curv], [c.lam for c in curv], deltas, w,
                                  beta=self.beta_rel * lam_max, gamma=self.gamma, complement="tail", rhs=self._rhs())
        return theta + self.eta * step


def _stack_weights(messages):
    w = Aggregator.sample_weights(messages)
    return [w[c] for c in messages]


class ServerAdam:
    """The server Adam of FedFish (App. A: Adam as the global optimizer): ``step(θ, Δ)`` takes the merged
    delta ``Δ`` as the negative pseudo-gradient and returns the new θ; its moments persist across rounds."""

    def __init__(self, lr: float = 0.01, betas=(0.9, 0.99), eps: float = 1e-3):
        if not lr > 0:
            raise ValueError(f"server Adam learning rate must be > 0, got {lr}")
        self.lr, self.betas, self.eps = lr, betas, eps
        self._opt = None
        self._param = None

    def step(self, theta, delta):
        if self._param is None or self._param.shape != theta.shape:
            self._param = torch.nn.Parameter(theta.detach().clone())
            self._opt = torch.optim.Adam([self._param], lr=self.lr, betas=self.betas, eps=self.eps)
        with torch.no_grad():
            self._param.copy_(theta)
        self._param.grad = -delta.detach()
        self._opt.step()
        return self._param.detach().clone()

    def state_dict(self) -> dict:
        """The moments and the step count (empty before the first step): plain tensors, for checkpoints."""
        if self._opt is None:
            return {}
        st = self._opt.state[self._param]
        return {"param": self._param.detach().clone(), "step": st["step"].clone(),
                "exp_avg": st["exp_avg"].clone(), "exp_avg_sq": st["exp_avg_sq"].clone()}

    def load_state_dict(self, d: dict) -> None:
        """Restore :meth:`state_dict`'s tensors into a fresh ``torch.optim.Adam``: the next :meth:`step` performs
        exactly the operations the uninterrupted run would."""
        if not d:
            self._opt = self._param = None
            return
        for key in ("param", "step", "exp_avg", "exp_avg_sq"):
            if not isinstance(d.get(key), torch.Tensor):
                raise ValueError(f"server Adam state lacks the tensor {key!r}")
        p = d["param"]
        if not (d["exp_avg"].shape == d["exp_avg_sq"].shape == p.shape and d["step"].numel() == 1):
            raise ValueError("server Adam state: moments and parameters differ in shape")
        self._param = torch.nn.Parameter(p.detach().clone())
        self._opt = torch.optim.Adam([self._param], lr=self.lr, betas=self.betas, eps=self.eps)
        self._opt.state[self._param] = {"step": d["step"].clone(), "exp_avg": d["exp_avg"].clone(),
                                        "exp_avg_sq": d["exp_avg_sq"].clone()}


class FedFishAggregator(Aggregator):
    """FedFish (Alg. 1): merged delta ``Σ n_i F_i Δ_i / Σ n_i F_i`` (coordinates where every Fisher is 0 fall
    back to the sample-weighted mean delta), applied by a server Adam (``server_opt='adam'``, its
    pseudo-gradient) or directly, ``θ + Δ_F`` (``server_opt='avg'``).

    Robust options (:mod:`fedsciml.runtime.robust`), as FIPA's merge takes them: ``clip_norm`` bounds every
    ``Δ_i`` to norm C first; ``robust="median"|"trimmed"`` replaces the numerator ``Σ w_i F_i Δ_i`` by
    ``(Σ w_i) · rule_i(F_i Δ_i)`` (and the fallback mean delta by ``rule_i(Δ_i)``), the coordinate-wise median /
    trimmed mean of the clients' Fisher-weighted deltas; the merged Fisher ``Σ w_i F_i`` is kept."""

    name = "fedfish"

    def __init__(self, server_lr: float = 0.01, betas=(0.9, 0.99), eps: float = 1e-3, server_opt: str = "adam",
                 robust: str = "mean", trim: float = 0.2, clip_norm: float | None = None):
        if server_opt not in ("adam", "avg"):
            raise ValueError(f"FedFish server optimizer must be 'adam' or 'avg', got {server_opt!r}")
        self.server_opt = server_opt
        self.adam = ServerAdam(server_lr, betas, eps) if server_opt == "adam" else None
        self.rule = _robust.RobustRule(robust, float(trim), None if clip_norm is None else float(clip_norm))

    def schema(self):
        return Schema({"delta": Field(("p",)), **Diagonal.fields(), "n": Field((1,), positive=True)})

    def merged_delta(self, messages):
        w = _stack_weights(messages)
        msgs = list(messages.values())
        deltas = [m["delta"] for m in msgs]
        if self.rule.clip_norm is not None:
            deltas = list(_robust.clip_rows(torch.stack(deltas), self.rule.clip_norm))
        den = sum(wi * m["fisher"] for wi, m in zip(w, msgs))
        if self.rule.rule == "mean":
            num = sum(wi * m["fisher"] * d for wi, m, d in zip(w, msgs, deltas))
            avg = sum(wi * d for wi, d in zip(w, deltas))
        else:
            rule = _robust.RobustRule(self.rule.rule, self.rule.trim)
            num = sum(w) * rule.combine(torch.stack([m["fisher"] * d for m, d in zip(msgs, deltas)]), w)
            avg = sum(w) * rule.combine(torch.stack(deltas), w)
        return torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny), avg)

    def aggregate(self, theta, messages, server_round: int | None = None):
        if not messages:
            raise ValueError("no client messages to aggregate")
        delta = self.merged_delta(messages)
        return theta + delta if self.adam is None else self.adam.step(theta, delta)

    def state_dict(self):
        return {**super().state_dict(), "adam": self.adam.state_dict() if self.adam is not None else {}}

    def load_state_dict(self, d):
        super().load_state_dict(d)
        if self.adam is not None:
            self.adam.load_state_dict(d["adam"])


class FedAvgAdamAggregator(FedAvgAggregator):
    """FedAvg with FedFish's server Adam (FedAdam, Reddi et al. 2021): the (robust) sample-weighted mean
    delta as the pseudo-gradient, so FedAvg and FedFish can be compared with the same server optimizer."""

    def __init__(self, server_lr: float = 0.01, betas=(0.9, 0.99), eps: float = 1e-3, **kw):
        super().__init__(**kw)
        self.adam = ServerAdam(server_lr, betas, eps)

    def aggregate(self, theta, messages, server_round: int | None = None):
        step = super().aggregate(torch.zeros_like(theta), messages, server_round)  # 0 + 1·Δ: exactly FedAvg's mean delta
        return self.adam.step(theta, step)

    def state_dict(self):
        return {**super().state_dict(), "adam": self.adam.state_dict()}

    def load_state_dict(self, d):
        super().load_state_dict(d)
        self.adam.load_state_dict(d["adam"])


class FisherMergeAggregator(Aggregator):
    """FisherMerge (Matena & Raffel): ``Σ λ_i F_i w_i / Σ λ_i F_i``, λ_i = n_i/N, ``F_i ← max(F_i, floor)``."""

    name = "fishermerge"

    def __init__(self, fisher_floor: float = 1e-6):
        if not fisher_floor > 0:
            raise ValueError(f"fisher floor must be > 0, got {fisher_floor}")
        self.floor = fisher_floor

    def schema(self):
        return Schema({"w": Field(("p",)), **Diagonal.fields(), "n": Field((1,), positive=True)})

    def aggregate(self, theta, messages, server_round: int | None = None):
        if not messages:
            raise ValueError("no client messages to aggregate")
        w = _stack_weights(messages)
        F = [m["fisher"].clamp_min(self.floor) for m in messages.values()]
        num = sum(wi * Fi * m["w"] for wi, Fi, m in zip(w, F, messages.values()))
        return num / sum(wi * Fi for wi, Fi in zip(w, F))


class NonFiniteObjective(FloatingPointError):
    """A server optimisation met a non-finite gradient or validation score: the run cannot
    produce the optimum it reports, so it stops instead of returning its start point."""


def _adam_best(w0, grad_fn, evaluate, steps, lr, betas, eps, eval_every, who="server Adam"):
    """Adam on a quadratic/log-posterior from ``w0``; returns (best w, history) by ``evaluate``
    (higher is better) every ``eval_every`` steps; without ``evaluate`` the last iterate.

    A non-finite gradient raises :class:`NonFiniteObjective` naming ``who`` and the step: Adam on
    a NaN gradient never moves a finite best, and returning the start as "the best" would pass a
    broken objective off as a converged one (FedBEns on a float32 ``eigh`` NaN returned the
    median start at chance accuracy).  Likewise if no validation score is finite."""
    w = torch.nn.Parameter(w0.detach().clone())
    opt = torch.optim.Adam([w], lr=lr, betas=betas, eps=eps)
    best, best_score, hist = w0.detach().clone(), -math.inf, []
    if evaluate is not None:
        best_score = float(evaluate(best))
        hist.append((0, best_score))
        if not math.isfinite(best_score):
            best_score = -math.inf
    for t in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        g = grad_fn(w.detach())
        if not bool(torch.isfinite(g).all()):
            raise NonFiniteObjective(f"{who}: the objective's gradient is not finite at step {t} of {steps} "
                                     f"({int((~torch.isfinite(g)).sum())} of {g.numel()} entries); "
                                     "refusing to return the start point as the optimum")
        w.grad = g
        opt.step()
        if evaluate is not None and (t % eval_every == 0 or t == steps):
            s = float(evaluate(w.detach()))
            hist.append((t, s))
            if math.isfinite(s) and s > best_score:
                best, best_score = w.detach().clone(), s
    if evaluate is not None and not any(math.isfinite(s) for _, s in hist):
        raise NonFiniteObjective(f"{who}: no validation score was finite ({len(hist)} evaluated)")
    return (w.detach().clone() if evaluate is None else best), hist


FEDFISHER_STARTS = ("samples", "uniform")


class FedFisherAggregator(Aggregator):
    """FedFisher (Jhunjhunwala et al. 2024): GD/Adam on ``Σ_i F̄_i (w − w_i)`` from the FedAvg
    average; Adam(η=0.01, β=(0.9, 0.99), ε=0.01), T=2000 steps, validation every 100 (App. D.3).

    ``curvature='diag'``: field ``fisher`` [p]; ``'kfac'``: fields ``A{l}``, ``G{l}``, ``rest``
    shaped like ``template`` (a :class:`KFAC` from any client: the layer layout).

    ``start`` — where the server optimization starts: ``"samples"`` (default, kept for the recorded
    tables), the sample-weighted FedAvg average ``Σ (n_i/N) w_i``; ``"uniform"``, the plain mean
    ``(1/K) Σ w_i`` of the paper's Algorithm 1 and Lemma 1.  The objective (and its minimizer) is the
    same; only the Adam trajectory, hence the best validation checkpoint, differs."""

    name = "fedfisher"

    def __init__(self, curvature: str = "kfac", template: KFAC | None = None, evaluate: Callable | None = None,
                 steps: int = 2000, lr: float = 0.01, betas=(0.9, 0.99), eps: float = 0.01, eval_every: int = 100,
                 optimizer: str = "adam", start: str = "samples"):
        if curvature not in ("diag", "kfac"):
            raise ValueError(f"FedFisher curvature must be 'diag' or 'kfac', got {curvature!r}")
        if curvature == "kfac" and template is None:
            raise ValueError("FedFisher(K-FAC) needs a KFAC template for the layer layout")
        if optimizer not in ("adam", "gd"):
            raise ValueError(f"optimizer must be 'adam' or 'gd', got {optimizer!r}")
        if start not in FEDFISHER_STARTS:
            raise ValueError(f"FedFisher start must be one of {', '.join(FEDFISHER_STARTS)}, got {start!r}")
        self.start = start
        if steps < 0 or not lr > 0:
            raise ValueError(f"need steps ≥ 0 and lr > 0, got steps={steps}, lr={lr}")
        self.curvature, self.template, self.evaluate = curvature, template, evaluate
        self.steps, self.lr, self.betas, self.eps, self.eval_every = steps, lr, betas, eps, max(1, eval_every)
        self.optimizer = optimizer
        self.history = []

    def schema(self):
        curv = Diagonal.fields() if self.curvature == "diag" else KFAC.fields(self.template)
        return Schema({"w": Field(("p",)), "n": Field((1,), positive=True), **curv})

    def operators(self, messages):
        """``(weights, [F_i as a matvec])``."""
        w = _stack_weights(messages)
        if self.curvature == "diag":
            ops = [(lambda v, d=Diagonal.from_message(m).d: d * v) for m in messages.values()]
        else:
            ops = [KFAC.from_message(m, layout=self.template).matvec for m in messages.values()]
        return w, ops

    def summed_operator(self, messages):
        """``v ↦ Σ_i (n_i/N) F_i v`` with the clients' factors stacked (one batched product per layer)."""
        w = torch.tensor(_stack_weights(messages))
        msgs = list(messages.values())
        if self.curvature == "diag":
            d = sum(wi * m["fisher"] for wi, m in zip(w.tolist(), msgs))
            return lambda v: d * v
        t = self.template
        w = w.to(dtype=msgs[0]["w"].dtype, device=msgs[0]["w"].device)
        As = [torch.stack([m[f"A{i}"] for m in msgs]) for i in range(len(t.blocks))]
        Gs = [torch.stack([w[j] * m[f"G{i}"] for j, m in enumerate(msgs)]) for i in range(len(t.blocks))]
        rest = sum(wi * m["rest"] for wi, m in zip(w.tolist(), msgs))

        def op(v):
            res = torch.zeros_like(v)
            for i in range(len(t.blocks)):
                t._scatter(res, i, (Gs[i] @ t._block(v, i) @ As[i]).sum(0))
            res[t.rest_idx] = rest * v[t.rest_idx]
            return res
        return op

    def aggregate(self, theta, messages, server_round: int | None = None):
        if not messages:
            raise ValueError("no client messages to aggregate")
        w, ops = self.operators(messages)
        ws = [m["w"] for m in messages.values()]
        w_start = sum(ws) / len(ws) if self.start == "uniform" else sum(wi * wm for wi, wm in zip(w, ws))
        b = sum(wi * op(wm) for wi, op, wm in zip(w, ops, ws))
        F = self.summed_operator(messages)
        grad = lambda v: F(v) - b  # noqa: E731
        if self.optimizer == "gd":
            v = w_start.clone()
            for _ in range(self.steps):
                v = v - self.lr * grad(v)
            if not bool(torch.isfinite(v).all()):
                raise NonFiniteObjective(f"FedFisher server GD: the iterate is not finite after {self.steps} steps "
                                         f"(lr={self.lr} too large for the summed Fisher, or a non-finite message)")
            return v
        best, self.history = _adam_best(w_start, grad, self.evaluate, self.steps, self.lr, self.betas, self.eps,
                                        self.eval_every, who="FedFisher server Adam")
        return best


class RegMeanAggregator(Aggregator):
    """RegMean (Jin et al. 2023): per Linear/Conv2d layer (convs over unfolded patches)
    ``Wᵀ = (Σ_i G̃_i)⁻¹ Σ_i G̃_i W_iᵀ`` with ``G̃ = α G + (1−α) diag G``; other parameters
    are sample-weighted averages.  With ``alphas`` of several values and ``evaluate``,
    α is picked on the validation set (as FedFisher's App. D.3 does)."""

    name = "regmean"

    def __init__(self, template: KFAC, alphas=(0.9,), evaluate: Callable | None = None, ridge: float = 1e-6):
        for a in alphas:
            if not 0 <= a <= 1:
                raise ValueError(f"RegMean alpha must be in [0, 1], got {a}")
        self.template, self.alphas, self.evaluate, self.ridge = template, tuple(alphas), evaluate, ridge
        self.chosen_alpha = None

    def schema(self):
        f = {"w": Field(("p",)), "n": Field((1,), positive=True)}
        for i, (a, _) in enumerate(self.template.factor_shapes()):
            f[f"gram{i}"] = Field((a, a), psd="square")
        return Schema(f)

    def merge(self, messages, alpha):
        t = self.template
        msgs = list(messages.values())
        wts = _stack_weights(messages)
        out = sum(wi * m["w"] for wi, m in zip(wts, msgs))
        for i in range(len(t.blocks)):
            lhs, rhs = 0, 0
            for m in msgs:
                G = m[f"gram{i}"]
                G = alpha * G + (1 - alpha) * torch.diag(torch.diagonal(G))
                lhs = lhs + G
                rhs = rhs + G @ t._block(m["w"], i).T
            lhs = lhs + self.ridge * torch.trace(lhs) / lhs.shape[0] * torch.eye(lhs.shape[0], dtype=lhs.dtype,
                                                                                  device=lhs.device)
            W = torch.linalg.solve(lhs, rhs).T
            t._scatter(out, i, W)
        return out

    def aggregate(self, theta, messages, server_round: int | None = None):
        if not messages:
            raise ValueError("no client messages to aggregate")
        best, best_s, why = None, -math.inf, []
        for a in self.alphas:
            w = self.merge(messages, a)
            if not bool(torch.isfinite(w).all()):  # a singular Gram: never "the best" by default
                why.append(f"α={a}: non-finite merge")
                continue
            s = float(self.evaluate(w)) if (self.evaluate is not None and len(self.alphas) > 1) else 0.0
            if not math.isfinite(s):
                why.append(f"α={a}: validation score {s}")
                continue
            if best is None or s > best_s:
                best, best_s, self.chosen_alpha = w, s, a
        if best is None:
            raise NonFiniteObjective(f"RegMean: no α gave a finite merge and score ({'; '.join(why)})")
        return best


class FedBEnsAggregator(Aggregator):
    """FedBEns (Talpini et al. 2025): client c sends M modes ``w_m^c`` [M, p] and Laplace
    precisions ``Λ_m^c = (n_c/T) F_m^c + I/σ²`` (F: K-FAC, diagonal, or diagonal with the
    full last-layer block).  The server maximizes Eq. 5,
    ``Σ_c log Σ_m (1/M) N(w | w_m^c, Λ_m^c⁻¹) − (C−1) log p(w)`` with ``p = N(0, σ²I)``,
    once per component from the coordinate-wise median over clients of ``w_m^c``, with Adam
    (default hyper-parameters, 300 steps, best validation every 30), and returns the M
    global modes [M, p] for ensemble prediction."""

    name = "fedbens"

    def __init__(self, approx: str = "kfac", M: int = 5, template: KFAC | None = None, last=None,
                 temperature: float = 0.1, prior_var: float = 0.1, steps: int = 300, lr: float = 1e-3,
                 eval_every: int = 30, evaluate: Callable | None = None):
        if approx not in ("kfac", "diag", "diagfull"):
            raise ValueError(f"FedBEns precision must be 'kfac', 'diag' or 'diagfull', got {approx!r}")
        if approx == "kfac" and template is None:
            raise ValueError("FedBEns(K-FAC) needs a KFAC template")
        if approx == "diagfull" and last is None:
            raise ValueError("FedBEns(diag+full) needs the last-layer index tensor")
        if M < 1 or not temperature > 0 or not prior_var > 0:
            raise ValueError(f"need M ≥ 1, T > 0, σ² > 0; got M={M}, T={temperature}, σ²={prior_var}")
        self.approx, self.M, self.template, self.last = approx, int(M), template, last
        self.T, self.s2, self.steps, self.lr, self.eval_every = temperature, prior_var, steps, lr, max(1, eval_every)
        self.evaluate = evaluate

    def schema(self):
        M = self.M
        f = {"w": Field((M, "p")), "n": Field((1,), positive=True)}
        if self.approx == "kfac":
            for i, (a, g) in enumerate(self.template.factor_shapes()):
                f[f"A{i}"] = Field((M, a, a), psd="square")
                f[f"G{i}"] = Field((M, g, g), psd="square")
            f["rest"] = Field((M, self.template.rest_idx.numel()), nonneg=True)
        else:
            f["diag"] = Field((M, "p"), nonneg=True)
            if self.approx == "diagfull":
                q = self.last.numel()
                f["last"] = Field((M, q, q), psd="square")
        return Schema(f)

    def neg_log_posterior(self, messages):
        """``w ↦ −L(w)`` of Eq. 5, vectorized over all (client, mode) Gaussians.

        Computed in float64 whatever the messages' dtype (``w`` is cast in, the value is float64;
        its autograd gradient comes back in ``w``'s dtype): a small client's K-FAC factor is
        rank-deficient (16 images → an 84×84 ``A`` of rank 38, 80 % exact zeros) and torch's
        float32 ``eigh`` returned NaN on one (Hsu split, seed 1, client 2), which made Eq. 5
        NaN everywhere; float64 ``eigh`` does not, and the log-determinants of a 10⁵-term sum
        need the precision anyway.  The factors' eigenvalues are clipped at 0 (a PSD factor's round-off can make
        its smallest one slightly negative)."""
        dt = torch.float64
        msgs = [{k: v.to(dt) for k, v in m.items()} for m in messages.values()]
        C, M = len(msgs), self.M
        mu = torch.stack([m["w"] for m in msgs])  # [C, M, p]
        s = torch.tensor([float(m["n"].reshape(-1)[0]) / self.T for m in msgs], dtype=mu.dtype,
                         device=mu.device)[:, None]  # [C, 1]
        prior = 1.0 / self.s2
        if self.approx == "kfac":
            t = self.template
            rest = s[..., None] * torch.stack([m["rest"] for m in msgs]) + prior  # [C, M, r]
            logdet = torch.log(rest).sum(-1)
            layers = []
            for i in range(len(t.blocks)):
                la, Ua = torch.linalg.eigh(torch.stack([m[f"A{i}"] for m in msgs]))  # [C, M, a]
                lg, Ug = torch.linalg.eigh(torch.stack([m[f"G{i}"] for m in msgs]))
                lam = s[..., None, None] * lg.clamp_min(0)[..., :, None] * la.clamp_min(0)[..., None, :] + prior
                logdet = logdet + torch.log(lam).sum((-1, -2))
                layers.append((Ug, Ua, lam))
            ridx = t.rest_idx

            def quad(w):
                dv = w - mu  # [C, M, p]
                q = (rest * dv[..., ridx] ** 2).sum(-1)
                for i, (Ug, Ua, lam) in enumerate(layers):
                    D = Ug.transpose(-1, -2) @ t._block(dv, i) @ Ua
                    q = q + (lam * D * D).sum((-1, -2))
                return q
        else:
            d = s[..., None] * torch.stack([m["diag"] for m in msgs]) + prior  # [C, M, p]
            if self.approx == "diag":
                logdet = torch.log(d).sum(-1)

                def quad(w):
                    return (d * (w - mu) ** 2).sum(-1)
            else:
                idx = self.last
                mask = torch.ones(mu.shape[-1], dtype=torch.bool, device=mu.device)
                mask[idx] = False
                keep = torch.nonzero(mask).reshape(-1)
                dk = d[..., keep]
                B = s[..., None, None] * torch.stack([m["last"] for m in msgs]) + prior * torch.eye(
                    idx.numel(), dtype=d.dtype, device=d.device)
                logdet = torch.log(dk).sum(-1) + torch.linalg.slogdet(B)[1]

                def quad(w):
                    dv = w - mu
                    vl = dv[..., idx]
                    return (dk * dv[..., keep] ** 2).sum(-1) + (vl[..., None, :] @ B @ vl[..., :, None])[..., 0, 0]

        def f(w):
            w = w.to(dt)
            terms = 0.5 * logdet - 0.5 * quad(w)  # [C, M]
            total = (torch.logsumexp(terms, -1) - math.log(M)).sum() + (C - 1) * (w * w).sum() / (2 * self.s2)
            return -total
        return f

    def aggregate(self, theta, messages, server_round: int | None = None):
        if not messages:
            raise ValueError("no client messages to aggregate")
        f = self.neg_log_posterior(messages)
        W = torch.stack([m["w"] for m in messages.values()])  # [C, M, p]
        starts = W.median(dim=0).values if W.shape[0] > 2 else W.mean(0)
        def grad(v):
            v = v.detach().clone().requires_grad_(True)
            return torch.autograd.grad(f(v), v)[0]
        out = []
        for m in range(self.M):
            best, _ = _adam_best(starts[m], grad, self.evaluate, self.steps, self.lr, (0.9, 0.999), 1e-8,
                                 self.eval_every, who=f"FedBEns server Adam (mode {m})")
            out.append(best)
        return torch.stack(out)
