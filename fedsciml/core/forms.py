"""One choice of how the Gauss–Newton statistics are formed: dense normal, kernel, chunked or matrix-free.

Every method that forms residual Jacobians asks :func:`choose_form` — centralized Levenberg–Marquardt
(``lm_solve='auto'``) and federated gn (``form='auto'``) through :func:`choose_lm_solve`, which adds the K-FAC
regime below and resolves the matrix-free solve's preconditioner and CG cap, and FIPA clients (``sketch='auto'``)
directly — from the sizes (n residual rows, p parameters), the device and the dtype.  The choice reads two things:

**Memory.**  The budget is a safety fraction (:data:`SAFETY`) of the device's free memory now
(:func:`available_memory`: ``torch.cuda.mem_get_info`` on CUDA, the OS's MemAvailable on a CPU).  A form fits
when what it holds at its peak is within the budget:

* ``normal`` — J (n×p), formed at once, and ``JᵀJ`` with its Cholesky factor (2p² floats);
* ``kernel`` — J and ``JJᵀ`` with its factor (2n²);
* ``chunked`` — ``JᵀJ`` and its factor (2p²) and one block of J rows at a time (:func:`fedsciml.core.stats.
  chunked_gn_stats`; the block as large as the rest of the budget allows, at least :data:`MIN_CHUNK_ROWS`);
* ``matfree`` — one residual graph and a few p-vectors (it always "fits": it is what is left).

Forming J through ``vmap(jacrev)`` of a PDE residual holds more than J: :data:`JACOBIAN_PEAK` times its bytes
(measured: Poisson d = 5, n = 4 500, p = 2 337 — J is 84 MB, the peak RSS rose by 417 MB: 4.96).  A Jacobian of
at most :data:`DENSE_FLOOR_ENTRIES` entries (5·10⁷, 400 MB in float64 — the size rule before this module) is
always formed whole: today's problems keep their forms on every device, whatever the momentary free memory, so
their numbers stay the same bits.

**Cost.**  Among the forms that fit, the cheapest step by a flop model in GEMM-equivalent flops:
forming J costs ``c_J·n·p``, a Gauss–Newton product ``JᵀJv`` (one jvp and one vjp) ``c_P·n·p``; normal and
chunked add ``n·p² + p³/3`` (Gram and Cholesky), kernel ``n²·p + n³/3``; matrix-free LM costs
``(CG iterations + Nyström rank)`` products per step (:data:`CG_ITERS_ESTIMATE` + the rank).  ``c_J`` and
``c_P`` per device kind (:data:`DEVICE_COSTS`) are measured, not guessed: on one CPU thread J took 1.8 s and a
product 0.4 s for n·p = 4.1·10⁷ with GEMM at 23 GFLOP/s (``c_J`` ≈ 1 000, ``c_P`` ≈ 220); on one H100
(torch 2.11, ``solve poisson --dim 5 --n-interior 20000 --n-boundary 200 --budget 60`` with ``--lm-solve normal``
and with ``matfree``: n = 20 200, p = 2 337) a dense step took 22 ms and a matrix-free step (≈ 70 products) 1.7 s,
both launch-bound, so at ~50 TFLOP/s fp64 GEMM ``c_J`` ≈ ``c_P`` ≈ 2.4·10⁴.  The model is what makes
``chunked`` win over ``matfree`` while p² fits (on a GPU up to any p whose p×p matrix fits; on a CPU up to
p ≈ 16 000), and the dense forms win whenever J fits.

Ties go to the first of ``normal, kernel, chunked, matfree`` (so n ≥ p: normal, n < p: kernel, as before).

**The K-FAC regime.**  On a CPU, where the residuals are in a channel form K-FAC for PINNs can use
(:func:`fedsciml.core.kfac_forms.jet_network`: the Poisson form, or Taylor-mode channels of heat-nd and any
``DomainPDE`` without a part that reads u at two points — :mod:`fedsciml.core.kfac_taylor`), p ≥
:data:`KFAC_MIN_PARAMS` and the cheapest dense step that fits costs at least :data:`KFAC_MIN_RATIO` times a K-FAC
step by the flop model (``KFAC_CG_ITERS·c_P·n·p``), LM's automatic solve (and federated gn's automatic form) is
matrix-free CG preconditioned by K-FAC and truncated at :data:`KFAC_CG_ITERS` iterations (:func:`choose_lm_solve`):
many cheap, inexact steps judged by LM's gain ratio, where a dense step is dear.  Measured at one thread, 60 CPU-s,
Poisson 5-d with the K-FAC-for-PINNs authors' exp16 points drawn afresh every step
(``reproductions/lm_auto_kfac_exp16.md``; "ratio": the model's dense/K-FAC step cost): K-FAC won at n = 3 500,
p = 10 065 (ratio 2.23; rel L2 8.3·10⁻³ against the kernel form's 0.52) and p = 5 297 (2.40; 9.9·10⁻³ against
0.13); the dense form won at n = 3 500, p = 2 337 (normal form, ratio 1.75; 2.9·10⁻³ against 2.7·10⁻²) and at
n = 600, p = 10 065 (kernel, 0.73; 1.3·10⁻³ against 4.4·10⁻³).  The thresholds lie between: a ratio ≥ 2 (between
1.75 and 2.23) and p ≥ 5 000 (no K-FAC win measured below p = 5 297).  A GPU keeps the dense
choice (dense steps are fast there: ``reproductions/gpu_h100.md``) where there is one; where no dense form fits or
gn's dense message is over its cap, the solve is matrix-free anyway and takes K-FAC on a GPU too
(``reproductions/gpu_h200_anchors.md``).  A preconditioner or CG cap the user named wins: a named ``nystrom`` or
``none`` turns the regime off (the evidence is for K-FAC), a named CG cap is the cap.

Federated gn (``need='gn'``) chooses a *message*: the smaller of the normal (``p(p+1)/2 + p`` floats) and
square-root (``min(n_m, p)(p+1)``) messages while it is at most :data:`MESSAGE_FLOATS` (a communication cap:
50 MB per client and step) and the clients' Jacobians fit, else ``matfree``.  FIPA clients (``need='fipa'``)
form their Jacobian (``dense``) when it and the smaller Gram fit, else ``matfree``.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

log = logging.getLogger(__name__)

#: the Nyström preconditioner's default rank ℓ (capped at p): every default of it is this one
#: (:class:`fedsciml.core.matfree.MatfreeConfig`, the choices here, centralized's and gn's options)
NYSTROM_RANK = 50

#: every form a choice can return, by need
NEEDS: dict[str, tuple[str, ...]] = {"lm": ("normal", "kernel", "chunked", "matfree"),
                                     "gn": ("normal", "sqrt", "matfree"),
                                     "fipa": ("dense", "matfree")}
#: a Jacobian with at most this many entries is always formed whole (the size rule before device awareness)
DENSE_FLOOR_ENTRIES = 50_000_000
#: peak bytes of forming J by ``vmap(jacrev)`` over J's own bytes (Poisson d = 5, 4 500 × 2 337: 4.96)
JACOBIAN_PEAK = 5.0
#: fraction of the free memory a form may plan to hold (CUDA: a fresh process's free memory, less the caching
#: allocator's slack; CPU: a shared machine's MemAvailable, which other processes also draw on)
SAFETY = {"cuda": 0.8, "cpu": 0.5}
#: (c_J, c_P): GEMM-equivalent flops per Jacobian entry of forming J, and of one product JᵀJv (module docstring)
DEVICE_COSTS = {"cpu": (1000.0, 220.0), "cuda": (24000.0, 24000.0)}
#: CG iterations a matrix-free LM step is assumed to take (Nyström-preconditioned; the sketch's rank is added)
CG_ITERS_ESTIMATE = 20
#: federated gn sends no client matrix larger than this many floats (50 MB in float64): a communication cap
MESSAGE_FLOATS = 6_250_000
#: the smallest block of rows the chunked form streams (below it the chunked form is said not to fit)
MIN_CHUNK_ROWS = 64
#: the K-FAC regime (module docstring): on a CPU, with residuals in K-FAC's channel form, from this many parameters…
KFAC_MIN_PARAMS = 5_000
#: …where the cheapest dense step that fits costs at least this many K-FAC steps by the flop model
KFAC_MIN_RATIO = 2.0
#: CG iterations per solve in the K-FAC regime (a truncated solve: many cheap steps)…
KFAC_CG_ITERS = 10
#: …reached by a cap that grows with the run where no cap is named: this many at the first step, then
#: :data:`CG_GROWTH` more per accepted step (:func:`fedsciml.core.matfree.cg_cap`)
KFAC_CG_START = 3
#: CG iterations a growing cap (``MatfreeConfig.cg_start``) adds per accepted step
CG_GROWTH = 2
#: CG iterations per matrix-free solve outside it (a full solve; the cap stops a stalled CG)
FULL_CG_ITERS = 500
#: the most bytes of residual graph LM's matrix-free operator holds at once: a larger graph (n rows × the floats a
#: row keeps, ``graph_floats`` of :func:`choose_lm_solve`) is held in row blocks of this size
#: (:class:`fedsciml.core.matfree.BlockGNOperator`).  A block costs one more forward pass per product whatever its
#: size, so larger blocks buy nothing once the rows are cut; 4 GB keeps PINNacle's 5 × 100 network on 33k–164k
#: rows (0.6–0.8 MB of graph a row) within 8 GB of peak RSS (reproductions/pinnacle.md)
MATFREE_GRAPH_BYTES = 4e9
#: the matrix-free solve's preconditioners; ``auto``: K-FAC in the regime, else Nyström
PRECONDS = ("auto", "nystrom", "kfac", "none")


def available_memory(device: torch.device | str | None = None) -> int | None:
    """Bytes of memory available now: free GPU memory for a CUDA device — the driver's free memory plus what this
    process's caching allocator holds reserved but unused (it is reused before the driver is asked again; without
    it, runs in one process saw 33, then 31, then 15 GB free on an 80 GB H100: ``reproductions/gpu_h100.md``) —,
    else the OS's MemAvailable, lowered to what this process's address-space limit (``ulimit -v``) and its cgroup's
    memory limit still allow (``None`` where none of them can be read)."""
    if device is not None and torch.device(device).type == "cuda":
        dev = torch.device(device)
        cached = int(torch.cuda.memory_reserved(dev)) - int(torch.cuda.memory_allocated(dev))
        return int(torch.cuda.mem_get_info(dev)[0]) + max(0, cached)
    free = _os_available()
    limits = [x for x in (_address_space_left(), _cgroup_left()) if x is not None]
    if limits:
        return min(limits) if free is None else min([free, *limits])
    return free


def _os_available() -> int | None:
    """The OS's MemAvailable (``/proc/meminfo``, else ``sysconf``), ``None`` where neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # no /proc (not Linux): the sysconf estimate below
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no such sysconf names here
        return None


def _address_space_left() -> int | None:
    """Bytes this process may still map under its address-space limit (``ulimit -v``, ``RLIMIT_AS``): the limit
    less the process's current virtual size; ``None`` without a limit.  A run under ``ulimit -v 3000000`` on a
    machine with 24 GB free was planned against the 24 GB and then failed in its first allocation (or thrashed)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):  # pragma: no cover - no resource module (not POSIX)
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = _virtual_size()
    if used is None:  # pragma: no cover - no /proc: the whole limit is counted as left, and said
        log.warning("address-space limit %d bytes: this process's size is unknown (no /proc/self/status VmSize); "
                    "the memory check counts the whole limit as left", soft)
        used = 0
    return max(0, int(soft) - used)


def _virtual_size() -> int | None:
    """This process's virtual size in bytes (``VmSize``), ``None`` where ``/proc`` does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - no /proc
        return None
    return None


def _cgroup_left() -> int | None:
    """Bytes left under this process's cgroup (v2) memory limit, ``memory.max − memory.current``; ``None``
    without a limit or a cgroup v2 mount."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((ln.strip().split(":", 2)[2] for ln in f if ln.startswith("0::")), None)
        if path is None:
            return None
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as f:
            top = f.read().strip()
        if top == "max":
            return None
        with open(os.path.join(base, "memory.current")) as f:
            used = int(f.read().strip())
        return max(0, int(top) - used)
    except OSError:  # no cgroup v2 mount or files: no cgroup limit to honour
        return None
    except (ValueError, IndexError) as e:  # files there but unreadable: the limit is not honoured, and said
        log.warning("cgroup memory limit unreadable (%s: %s); the memory check ignores it", type(e).__name__, e)
        return None


@dataclass(frozen=True)
class Budget:
    """What a form may hold: ``bytes`` = ``safety`` × ``free`` on ``device`` (``free`` None: unreadable, then
    only the dense floor and the matrix-free form are considered safe)."""

    device: str
    free: int | None
    safety: float

    @property
    def bytes(self) -> float:
        return 0.0 if self.free is None else self.safety * self.free

    def describe(self) -> str:
        if self.free is None:
            return f"free memory on {self.device} unreadable"
        return f"{_size(self.bytes)} = {self.safety:g} × {_size(self.free)} free on {self.device}"


def device_budget(device: torch.device | str | None = None, free: int | None = None) -> Budget:
    """The memory budget on ``device`` (``free`` given: a fake free-memory figure, for tests and planning)."""
    dev = torch.device(device if device is not None else "cpu")
    kind = "cuda" if dev.type == "cuda" else "cpu"
    if free is None:
        free = available_memory(dev)
    return Budget(str(dev), None if free is None else int(free), SAFETY[kind])


@dataclass(frozen=True)
class FormCost:
    """One form's planned peak ``bytes`` and ``flops`` (GEMM-equivalent, per step) and whether it ``fits``."""

    form: str
    bytes: float
    flops: float
    fits: bool


@dataclass(frozen=True)
class FormChoice:
    """The chosen ``form``, why (``reason``, one line), the chunk size for ``chunked`` (rows of J) or for LM's
    ``matfree`` (rows per block of the residual graph; ``None``: one block), and every considered form's cost."""

    form: str
    reason: str
    chunk_rows: int | None
    costs: tuple[FormCost, ...]
    #: the matrix-free solve's preconditioner and CG cap (:func:`choose_lm_solve`; ``None`` from :func:`choose_form`)
    precond: str | None = None
    cg_iters: int | None = None
    #: the first step's CG cap where the cap grows with the run (the K-FAC regime with no cap named), else ``None``
    cg_start: int | None = None

    def settings(self) -> dict:
        """What a result records of the choice."""
        out: dict = {"form": self.form, "form_reason": self.reason}
        if self.chunk_rows is not None:
            out["chunk_rows"] = self.chunk_rows
        if self.form == "matfree" and self.precond is not None:
            out.update(precond=self.precond, cg_cap=self.cg_iters)
            if self.cg_start is not None:
                out["cg_start"] = self.cg_start
        return out


def _size(b: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= k:
            return f"{b / k:.3g} {unit}"
    return f"{b:.0f} B"


def chunk_rows_for(p: int, budget_bytes: float, itemsize: int = 8, n: int | None = None) -> int:
    """Rows of J one chunk of the chunked form may hold: what is left of the budget after ``JᵀJ`` and its factor
    (2p² floats), divided by a row's peak while being formed (``JACOBIAN_PEAK·p`` floats); at least
    :data:`MIN_CHUNK_ROWS`, at most ``n``."""
    left = budget_bytes - 2.0 * p * p * itemsize
    rows = int(left // (JACOBIAN_PEAK * p * itemsize)) if left > 0 else 0
    rows = max(MIN_CHUNK_ROWS, rows)
    return min(rows, int(n)) if n is not None else rows


def _lm_costs(n: int, p: int, s: int, budget: Budget, kind: str, rank: int) -> tuple[list[FormCost], int]:
    cj, cp = DEVICE_COSTS[kind]
    jac = JACOBIAN_PEAK * n * p * s
    floor = n * p <= DENSE_FLOOR_ENTRIES
    normal_b = jac + 2.0 * p * p * s
    kernel_b = jac + 2.0 * n * n * s
    rows = chunk_rows_for(p, budget.bytes, s, n)
    chunk_b = 2.0 * p * p * s + JACOBIAN_PEAK * rows * p * s
    gram = float(n) * p * p + p ** 3 / 3.0
    costs = [FormCost("normal", normal_b, cj * n * p + gram, floor or normal_b <= budget.bytes),
             FormCost("kernel", kernel_b, cj * n * p + float(n) * n * p + n ** 3 / 3.0,
                      floor or kernel_b <= budget.bytes),
             FormCost("chunked", chunk_b, cj * n * p + gram, chunk_b <= budget.bytes),
             FormCost("matfree", 0.0, (CG_ITERS_ESTIMATE + rank) * cp * n * p, True)]
    return costs, rows


def choose_form(n: int, p: int, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float64,
                need: str = "lm", allowed: Sequence[str] | None = None, rows: Sequence[int] | None = None,
                free: int | None = None, rank: int = NYSTROM_RANK) -> FormChoice:
    """How to form the Gauss–Newton statistics of ``n`` residual rows and ``p`` parameters (module docstring).

    ``need``: ``lm`` (a data holder solving LM: normal, kernel, chunked, matfree), ``gn`` (a federated gn message:
    normal, sqrt, matfree; ``rows`` the clients' row counts, ``n`` their sum) or ``fipa`` (a FIPA client: dense,
    matfree).  ``allowed`` restricts the forms (the first allowed one that fits wins ties); ``free`` fakes the
    device's free bytes; ``rank``: the Nyström rank of the matrix-free LM step."""
    if need not in NEEDS:
        raise ValueError(f"form need must be one of {', '.join(NEEDS)}, got {need!r}")
    n, p = int(n), int(p)
    if n < 1 or p < 1:
        raise ValueError(f"a form choice needs n ≥ 1 rows and p ≥ 1 parameters, got n={n}, p={p}")
    forms = NEEDS[need] if allowed is None else tuple(f for f in NEEDS[need] if f in allowed)
    if not forms:
        raise ValueError(f"no form of {', '.join(NEEDS[need])} is allowed (allowed: {', '.join(allowed or ())})")
    budget = device_budget(device, free)
    kind = "cuda" if torch.device(budget.device).type == "cuda" else "cpu"
    s = torch.empty((), dtype=dtype).element_size()
    if need == "gn":
        choice = _choose_gn(n, p, s, budget, forms, rows)
    elif need == "fipa":
        choice = _choose_fipa(n, p, s, budget, forms)
    else:
        costs, chunk = _lm_costs(n, p, s, budget, kind, int(rank))
        choice = _cheapest(costs, forms, n, p, budget, chunk)
    log.debug("form choice (%s, n=%d, p=%d): %s — %s", need, n, p, choice.form, choice.reason)
    return choice


def kfac_regime(n: int, p: int, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float64,
                jets: bool | Callable[[], bool] = False, precond: str = "auto",
                free: int | None = None, dense: bool = True) -> tuple[bool, str]:
    """Whether an automatic choice for ``n`` rows and ``p`` parameters takes K-FAC-preconditioned CG truncated at
    :data:`KFAC_CG_ITERS` (the module docstring's regime), and why (or why not) in a few words: a CPU ``device``,
    ``p ≥`` :data:`KFAC_MIN_PARAMS`, no preconditioner other than ``kfac`` named (``precond``), residuals in a
    channel form K-FAC can use (``jets``: a bool, or a callable asked only when the other tests pass — finding a
    problem's channel form costs forward passes), and the cheapest dense LM step that fits at least
    :data:`KFAC_MIN_RATIO` K-FAC steps by the flop model; ``free``: a fake free-memory figure.

    ``dense=False``: the caller's choice is matrix-free whatever the preconditioner (no dense form fits, or
    federated gn's dense message is over its cap): then a GPU is no reason against K-FAC — the exemption holds
    where a dense step is the alternative (``reproductions/gpu_h200_anchors.md``) — and the cost test against a
    dense step is moot."""
    if precond not in PRECONDS:
        raise ValueError(f"precond must be one of {', '.join(PRECONDS)}, got {precond!r}")
    gpu = torch.device(device if device is not None else "cpu").type == "cuda"
    if gpu and dense:
        return False, "a GPU device (dense steps are fast there)"
    n, p = int(n), int(p)
    if p < KFAC_MIN_PARAMS:
        return False, f"p = {p:,} < {KFAC_MIN_PARAMS:,}"
    if precond not in ("auto", "kfac"):
        return False, f"precond {precond} named"
    fitting = []
    if dense:
        s = torch.empty((), dtype=dtype).element_size()
        costs, _ = _lm_costs(n, p, s, device_budget(device, free), "cpu", 0)
        fitting = [c for c in costs if c.form != "matfree" and c.fits]
    kfac = KFAC_CG_ITERS * DEVICE_COSTS["cpu"][1] * n * p
    if fitting:
        best = min(fitting, key=lambda c: c.flops)
        ratio = best.flops / kfac
        step = f"a {best.form} step (est. {best.flops:.2g} flop-eq) costs {ratio:.2f} K-FAC steps ({kfac:.2g})"
        if ratio < KFAC_MIN_RATIO:
            return False, f"{step} < {KFAC_MIN_RATIO:g}"
    else:
        step = "no dense form fits" if dense else "the solve is matrix-free in any case"
    if not (jets() if callable(jets) else jets):
        return False, "residuals not in a channel form K-FAC can use"
    return True, (f"{'a GPU' if gpu else 'a CPU'}, residuals in K-FAC's channel form, p = {p:,} ≥ "
                  f"{KFAC_MIN_PARAMS:,}, {step}")


def matfree_settings(regime: bool, precond: str = "auto", cg_iters: int | None = None) -> tuple[str, int]:
    """The matrix-free solve's preconditioner and CG cap: the named ones, else K-FAC and :data:`KFAC_CG_ITERS` in
    the K-FAC regime, Nyström and :data:`FULL_CG_ITERS` outside it."""
    pre = ("kfac" if regime else "nystrom") if precond == "auto" else precond
    cap = (KFAC_CG_ITERS if regime else FULL_CG_ITERS) if cg_iters is None else int(cg_iters)
    return pre, cap


def graph_block_rows(n: int, graph_floats: float | None, *, device: torch.device | str | None = None,
                     dtype: torch.dtype = torch.float64, free: int | None = None) -> tuple[int | None, str]:
    """``(rows per block, why)`` of LM's matrix-free operator over ``n`` rows that each keep ``graph_floats`` floats
    of residual graph: ``None`` while the whole graph is within the smaller of :data:`MATFREE_GRAPH_BYTES` and the
    device's budget (:func:`device_budget`; ``free`` fakes its free bytes), else as many rows as that holds (at
    least :data:`MIN_CHUNK_ROWS`)."""
    if not graph_floats:
        return None, ""
    s = torch.empty((), dtype=dtype).element_size()
    budget = device_budget(device, free)
    limit = MATFREE_GRAPH_BYTES if budget.free is None else min(MATFREE_GRAPH_BYTES, budget.bytes)
    whole = float(n) * float(graph_floats) * s
    if whole <= limit:
        return None, ""
    rows = max(MIN_CHUNK_ROWS, int(limit // (float(graph_floats) * s)))
    return rows, (f"its residual graph ({_size(whole)}: {int(n):,} rows × {float(graph_floats):,.0f} floats) held "
                  f"in blocks of {rows:,} rows (at most {_size(limit)} at once)")


def choose_lm_solve(n: int, p: int, *, solve: str = "auto", precond: str = "auto", cg_iters: int | None = None,
                    jets: bool | Callable[[], bool] = False, device: torch.device | str | None = None,
                    dtype: torch.dtype = torch.float64, free: int | None = None, rank: int = NYSTROM_RANK,
                    need: str = "lm", rows: Sequence[int] | None = None,
                    graph_floats: float | None = None) -> FormChoice:
    """Levenberg–Marquardt's solve (``need='lm'``; federated gn's message with ``need='gn'``): the form, and for the
    matrix-free form its preconditioner and CG cap (:attr:`FormChoice.precond`, :attr:`FormChoice.cg_iters`).

    ``solve``: ``auto`` or a form named by the caller; ``precond``: ``auto`` or a named preconditioner;
    ``cg_iters``: a named CG cap or ``None``; ``jets``: the residuals are in a K-FAC channel form (a bool, or a
    callable asked only where the regime's other conditions hold).
    ``auto`` takes the K-FAC regime where :func:`kfac_regime` says so (matrix-free, ``kfac``, CG capped at
    :data:`KFAC_CG_ITERS` unless a cap is named), else :func:`choose_form`'s choice with Nyström
    (``rank``) and :data:`FULL_CG_ITERS` for a matrix-free solve.  The preconditioner and cap depend on p, the
    device, the names and — through the regime's cost test — n.  ``graph_floats``: the floats of residual graph
    a row keeps in the matrix-free operator (LM, ``need='lm'``): where n rows of it exceed
    :data:`MATFREE_GRAPH_BYTES` or the budget, a matrix-free choice holds it in blocks
    (:attr:`FormChoice.chunk_rows`: rows per block; :func:`graph_block_rows`)."""
    if cg_iters is not None and int(cg_iters) < 0:
        raise ValueError(f"cg_iters must be ≥ 0 CG iterations per solve (0: the damped K-FAC step; or None), got "
                         f"{cg_iters}")
    dense = True
    if torch.device(device if device is not None else "cpu").type == "cuda" and solve == "auto" \
            and int(p) >= KFAC_MIN_PARAMS and precond in ("auto", "kfac"):
        # a GPU keeps the dense choice where there is one; where the choice is matrix-free anyway, the
        # preconditioner is K-FAC's question as on a CPU
        dense = choose_form(n, p, device=device, dtype=dtype, need=need, rows=rows, free=free, rank=0).form != "matfree"
    regime, why = kfac_regime(n, p, device=device, dtype=dtype, jets=jets, precond=precond, free=free, dense=dense)
    regime = regime and solve == "auto"
    pre, cap = matfree_settings(regime, precond, cg_iters)
    if regime:
        base = choose_form(n, p, device=device, dtype=dtype, need=need, allowed=("matfree",), rows=rows, free=free,
                           rank=0)
        named = " (as asked)" if cg_iters is not None else ""
        start = None if cg_iters is not None or cap <= KFAC_CG_START else KFAC_CG_START
        grows = "" if start is None else f" (from {start} at the first step, +{CG_GROWTH} per accepted step)"
        reason = (f"matfree, K-FAC-preconditioned CG capped at {cap}{named}{grows}: {why} (many cheap truncated "
                  f"steps beat few dense ones there: reproductions/lm_auto_kfac_exp16.md)")
        block, how = graph_block_rows(n, graph_floats, device=device, dtype=dtype, free=free) if need == "lm" \
            else (None, "")
        return FormChoice("matfree", reason + (f"; {how}" if how else ""), block, base.costs, pre, cap, start)
    allowed = None if solve == "auto" else (solve,)
    choice = choose_form(n, p, device=device, dtype=dtype, need=need, allowed=allowed, rows=rows, free=free,
                         rank=rank if pre == "nystrom" else 0)
    reason = choice.reason
    if solve == "auto" and int(p) >= KFAC_MIN_PARAMS:  # say why the regime was not taken where p alone allows it
        reason += f"; not K-FAC-preconditioned CG: {why}"
    chunk = choice.chunk_rows
    if choice.form == "matfree" and need == "lm":
        chunk, how = graph_block_rows(n, graph_floats, device=device, dtype=dtype, free=free)
        reason += f"; {how}" if how else ""
    return FormChoice(choice.form, reason, chunk, choice.costs, pre, cap)


#: what a local-training client (FIPA, FedAvg, FedProx) forms to answer ``update`` (:func:`local_client_form`)
LOCAL_FORMS = ("none", "dense", "matfree")


def local_client_form(solver: str, curvature: str | None, sketch: str, adaptive: bool, n: int, p: int, *,
                      device: torch.device | str | None = None, dtype: torch.dtype = torch.float64,
                      free: int | None = None) -> str:
    """What a local-training client forms to answer ``update`` — the one place this is decided, for the client
    itself, the vectorized in-process path, the run's record and the memory estimate:

    * ``none``: no Jacobian (FedAvg/FedProx with local Adam: ``curvature=None``, ``solver='adam'``);
    * ``matfree``: no Jacobian — a low-rank FIPA client (``curvature='lowrank'``, not ``adaptive``, whose
      schedule reads the whole spectrum) with ``sketch='matfree'``, or ``'auto'`` where :func:`choose_form`
      (``need='fipa'``: ``J_m`` of ``n`` rows and its smaller Gram do not fit the device's budget; always dense
      while ``n·p ≤`` :data:`DENSE_FLOOR_ENTRIES`) says so.  Local ``gn``: the CG step and Nyström sketch of
      :func:`fedsciml.core.matfree.local_gn_sketch`; local Adam: subspace iteration on Gauss–Newton products;
    * ``dense``: every other case forms ``J_m`` (a local gn step's spectrum, the full ``H_m``, the adaptive
      schedule's spectrum, or the exact top-r eigenpairs).

    ``n``: the client's residual rows; ``free``: a fake free-memory figure (tests, planning)."""
    if curvature is None and solver != "gn":
        return "none"
    if curvature == "lowrank" and not adaptive and (sketch == "matfree" or (sketch == "auto" and choose_form(
            n, p, device=device, dtype=dtype, need="fipa", free=free).form == "matfree")):
        return "matfree"
    return "dense"


def _cheapest(costs: list[FormCost], forms: Sequence[str], n: int, p: int, budget: Budget,
              chunk: int) -> FormChoice:
    cand = [c for c in costs if c.form in forms]
    fit = [c for c in cand if c.fits] or [c for c in cand if c.form == "matfree"] or cand[-1:]
    best = min(fit, key=lambda c: c.flops)  # min keeps the first of equal costs: normal, kernel, chunked, matfree
    floor = n * p <= DENSE_FLOOR_ENTRIES
    if len(forms) == 1:  # a form named by the caller (lm_solve normal|kernel|chunked|matfree): no choice made
        fits = "fits" if best.fits else "does not fit"
        why = f"{best.form}: as asked ({_size(best.bytes)} planned, {fits} {budget.describe()})"
        if best.form == "chunked":
            why += f"; blocks of {chunk:,} rows"
        return FormChoice(best.form, why, chunk if best.form == "chunked" else None, tuple(costs))
    if best.form in ("normal", "kernel"):
        held = (f"J ({n:,}×{p:,}) has ≤ {DENSE_FLOOR_ENTRIES:.0e} entries (always formed)" if floor else
                f"J ({n:,}×{p:,}) and its Gram fit ({_size(best.bytes)} ≤ {budget.describe()})")
        why = f"{best.form}: {held}; {'n < p' if n < p else 'n ≥ p'}"
    elif best.form == "chunked":
        why = (f"chunked: J ({n:,}×{p:,}, {_size(JACOBIAN_PEAK * n * p * 8)} to form) does not fit "
               f"{budget.describe()}; JᵀJ does: J streamed in blocks of {chunk:,} rows")
    else:
        dense = [c for c in cand if c.form != "matfree"]
        if not any(c.fits for c in dense):
            least = min(dense, key=lambda c: c.bytes, default=None)
            need = f" (the least, {least.form}, needs {_size(least.bytes)})" if least is not None else ""
            why = f"matfree: no dense form fits {budget.describe()}{need}"
        else:
            why = "matfree: cheaper than the dense forms that fit"
    others = [c for c in cand if c.fits and c is not best]
    if others:
        why += f"; est. {best.flops:.2g} flop-eq/step against " + ", ".join(
            f"{c.form} {c.flops:.2g}" for c in others)
    return FormChoice(best.form, why, chunk if best.form == "chunked" else None, tuple(costs))


def _choose_gn(n: int, p: int, s: int, budget: Budget, forms: Sequence[str],
               rows: Sequence[int] | None) -> FormChoice:
    rows = [n] if not rows else [int(r) for r in rows]
    normal = p * (p + 1) // 2 + p
    sqrt = max(min(r, p) for r in rows) * (p + 1)
    floor = n * p <= DENSE_FLOOR_ENTRIES
    jac = JACOBIAN_PEAK * n * p * s  # the clients in one process form their Jacobians together (ClientBatch)
    fits_mem = floor or jac + 2.0 * p * p * s <= budget.bytes
    costs = (FormCost("normal", jac + 2.0 * p * p * s, float(normal), fits_mem and normal <= MESSAGE_FLOATS),
             FormCost("sqrt", jac, float(sqrt), fits_mem and sqrt <= MESSAGE_FLOATS),
             FormCost("matfree", 0.0, float(p), True))
    cand = [c for c in costs if c.form in forms and c.fits and c.form != "matfree"]
    if cand:
        best = min(cand, key=lambda c: c.flops)
        why = (f"{best.form}: {int(best.flops):,} floats per client (normal {normal:,}, sqrt {sqrt:,}; "
               f"cap {MESSAGE_FLOATS:,})")
        return FormChoice(best.form, why, None, costs)
    if "matfree" not in forms:
        best = [c for c in costs if c.form in forms][0]
        return FormChoice(best.form, f"{best.form}: the only allowed form (does not fit)", None, costs)
    if not fits_mem:
        why = f"matfree: the clients' Jacobians ({_size(jac)} to form) do not fit {budget.describe()}"
    else:
        why = f"matfree: the smaller dense message ({min(normal, sqrt):,} floats) exceeds {MESSAGE_FLOATS:,}"
    return FormChoice("matfree", why, None, costs)


def _choose_fipa(n: int, p: int, s: int, budget: Budget, forms: Sequence[str]) -> FormChoice:
    m = min(n, p)
    b = JACOBIAN_PEAK * n * p * s + 2.0 * m * m * s
    fits = n * p <= DENSE_FLOOR_ENTRIES or b <= budget.bytes
    costs = (FormCost("dense", b, float(n) * p * m, fits), FormCost("matfree", 0.0, 0.0, True))
    if fits and "dense" in forms or "matfree" not in forms:
        held = (f"J_m ({n:,}×{p:,}) has ≤ {DENSE_FLOOR_ENTRIES:.0e} entries" if n * p <= DENSE_FLOOR_ENTRIES
                else f"J_m ({n:,}×{p:,}) and its Gram fit ({_size(b)} ≤ {budget.describe()})")
        return FormChoice("dense", f"dense: {held}", None, costs)
    return FormChoice("matfree", f"matfree: J_m ({n:,}×{p:,}) and its Gram ({_size(b)}) do not fit "
                                 f"{budget.describe()}", None, costs)
