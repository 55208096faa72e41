"""Issue 38, findings 4, 5, 8 and 10: every planned allocation is checked before any work (plan only: nothing
here allocates what it refuses), the processes engine's limits (a cap on processes, a bounded wait for a stopped
client, a bad table blamed on its client), idle options refused, and ``clock='cpu'`` counting the clients' CPU or
refused where it cannot.  Each test failed on main before these changes."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import fedsciml as fs
import fedsciml.engines  # noqa: F401  (registers the engines)
from fedsciml.core import forms
from fedsciml.engines import processes
from fedsciml.runtime.resample import Growth
from fedsciml.options import OptionError
from fedsciml.problems import get_problem
from fedsciml.runtime import driver
from fedsciml.runtime.driver import OutOfMemory, plan
from fedsciml.runtime.history import Recorder
from fedsciml.runtime.loop import RoundConfig, Simulation
from fedsciml.runtime.transport import Failure, LocalTransport, Reply, Request, Transport

GB = 1e9
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def free_24gb(monkeypatch):
    monkeypatch.setattr(driver, "available_memory", lambda device=None: 24 * GB)


# --- finding 4: the memory check sees every planned allocation ----------------------------------------------


def test_the_address_space_limit_bounds_the_available_memory():
    """Under ``ulimit -v`` (the battery's 3000 MiB cap) a plan read the machine's MemAvailable (24 GB) and let
    ``--hidden 300000`` (centralized: 5.2 GB) and fedavg ``--hidden 10000,10000`` (10 GB) through, to hang.
    One interpreter under a cap 3 GB above its size: the figure is at most 3 GB and both plans are one line."""
    script = textwrap.dedent("""
        import resource
        vm = int(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmSize:'))) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + 3 * 2**30, vm + 3 * 2**30))
        import fedsciml.methods
        from fedsciml.core.forms import available_memory
        from fedsciml.problems import get_problem
        from fedsciml.runtime.driver import plan
        print('avail', available_memory())
        for method, kw in (('centralized', {}), ('fedavg', {'clients': 2, 'rounds': 1})):
            hidden = (300000,) if method == 'centralized' else (10000, 10000)
            try:
                plan(get_problem('sin1d', hidden=hidden), method, **kw)
                print('planned', method)
            except ValueError as e:  # OutOfMemory, or the problem's own check of its network's size
                print('refused', method, str(e))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert float(lines[0].split()[1]) <= 3 * 2**30
    assert [ln.split()[:2] for ln in lines[1:]] == [["refused", "centralized"], ["refused", "fedavg"]], lines
    assert "--hidden" in lines[1] and " GB" in lines[1] and "\n" not in lines[1]
    assert "1e+08 parameters" in lines[2] and " GB" in lines[2]


def test_the_address_space_and_cgroup_readers(monkeypatch):
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda what: (5 * 2**30, resource.RLIM_INFINITY))
    monkeypatch.setattr(forms, "_virtual_size", lambda: 2 * 2**30)
    assert forms._address_space_left() == 3 * 2**30
    assert forms.available_memory() <= 3 * 2**30


def test_an_explicit_kernel_form_counts_its_n_by_n_matrix(free_24gb):
    """``--lm-solve kernel`` on 10⁵ pooled rows forms JJᵀ (80 GB) and its factor: the estimate counted J only
    (0.7 GB) and the run died in ``J @ J.T`` with the allocator's message."""
    with pytest.raises(OutOfMemory, match=r"JJᵀ of the 100,000 pooled rows and its factor \(lm_solve kernel → kernel\): 160 GB"):
        plan(get_problem("sin1d", n_samples=100000), "centralized", lm_solve="kernel")


def test_gn_normal_form_counts_the_clients_p_by_p_statistics(free_24gb):
    """gn ``--form normal`` at ``--hidden 1000000`` (p = 3·10⁶): each client tried a 36 TB JᵀJ, failed, was asked
    20 times more, then the clients were blamed.  The estimate names the form and the bytes."""
    with pytest.raises(OutOfMemory) as e:
        plan(get_problem("sin1d", hidden=(10**6,)), "gn", clients=2, rounds=1, form="normal")
    msg = str(e.value)
    assert "every client's JᵀJ (3,000,001×3,000,001, packed), the server's sum and its factor (form normal)" in msg
    assert "\n" not in msg


def test_the_processes_engine_checks_memory_and_processes_at_plan(free_24gb, monkeypatch):
    """Engine processes had no memory check (engine ≠ local skipped it): each client process tried on its own.
    Now its check sees every client's share on this machine, and at most 4 processes per core."""
    with pytest.raises(OutOfMemory, match=r"engine 'processes' \(2 client process\(es\)"):
        plan(get_problem("sin1d", hidden=(10**6,)), "gn", clients=2, rounds=1, engine="processes")
    monkeypatch.setattr(processes, "cores", lambda: 2)
    with pytest.raises(ValueError, match=r"500 clients on 2 core\(s\) is more than 8 \(4 per core\)"):
        plan(get_problem("bratu", n_interior=10), "fipa", clients=500, rounds=1, engine="processes")
    plan(get_problem("bratu", n_interior=10), "fipa", clients=8, rounds=1, engine="processes")  # within the cap


def test_a_growth_schedule_is_checked_to_its_last_draw(free_24gb):
    """``--grow 1000`` without ``--grow-cap`` reached 10¹⁴ points a client by round 5 and hung; ``--grow 1e308``
    raised OverflowError; a budget-only run had no last size at all."""
    opts = dict(clients=2, rounds=5, resample=1, grow_every=1)
    with pytest.raises(OutOfMemory, match=r"grow 1000 every 1 round\(s\), resample 1: 399,999,999,999,999 "
                                          r"interior points in total after round 4; .* GB of memory"):
        plan(get_problem("bratu"), "gn", grow=1000, **opts)
    with pytest.raises(OutOfMemory, match=r"grow past 2\*\*62 interior points .* give grow_cap"):
        plan(get_problem("bratu"), "fedavg", grow=1e308, **opts)
    with pytest.raises(OutOfMemory, match=r"with a time budget only, the points grow without bound"):
        plan(get_problem("bratu"), "gn", clients=2, budget=5, resample=1, grow=2)
    plan(get_problem("bratu"), "gn", grow=1e308, grow_cap=1000, **opts)  # capped: planned at the cap
    plan(get_problem("bratu"), "centralized", grow=2, resample=1, grow_every=1, max_iters=5)  # 16× the points
    with pytest.raises(ValueError, match="give grow_cap"):
        Growth(1e308, 1).points(100, 3)
    assert Growth(1e308, 1, 1000).points(100, 3) == 1000 and Growth(2.0, 1).points(100, 3) == 800


# --- finding 8: an option that would be ignored is refused ----------------------------------------------------


def test_lm_solve_with_adam_is_refused():
    with pytest.raises(OptionError, match="option lm_solve has no effect here: it is an option of optimizer lm"):
        plan(get_problem("sin1d"), "centralized", optimizer="adam", lm_solve="kernel")


def test_a_binary_csv_is_one_line_naming_the_file(tmp_path):
    from fedsciml.problems.table import read_table

    bad = tmp_path / "bin.csv"
    bad.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ValueError, match=r"bin\.csv: not a UTF-8 text CSV table \(byte 0"):
        read_table(str(bad))


# --- finding 5: the processes engine -------------------------------------------------------------------------


def _job(**options):
    return {"problem": "bratu", "options": {"n_interior": 20, **options}, "clients": 2, "seed": 0, "device": "cpu",
            "threads": 1, "module": None}


def test_a_stopped_client_is_ended_after_a_bounded_wait():
    """A client process stopped with SIGSTOP hung the run forever (a blocking read of its pipe).  Now the wait is
    bounded: its answer is a dropout naming the wait, the process is ended, the other client's reply arrives."""
    import fedsciml.methods  # noqa: F401  (the client handlers)

    t = processes.ProcessTransport(_job(), 2, timeout=60)
    try:
        started = t.cpu_seconds()
        assert started > 0  # each reply carries its process's CPU seconds (clock cpu): the start is theirs too
        theta = get_problem("bratu", n_interior=20).init_params(0)
        first = t.ask([0, 1], Request("gn_stats", {"theta": theta}))
        assert all(isinstance(a, Reply) for a in first.values()), first
        assert t.cpu_seconds() > started
        os.kill(t._procs[1].pid, signal.SIGSTOP)
        t.timeout = 2.0
        t0 = time.monotonic()
        got = t.ask([0, 1], Request("loss", {"theta": theta}))
        assert time.monotonic() - t0 < 30
        assert isinstance(got[0], Reply)
        assert isinstance(got[1], Failure) and got[1].dropped and "no answer within 2 s" in got[1].reason
        assert t._procs[1].poll() == -signal.SIGKILL
        again = t.ask([1], Request("loss", {"theta": theta}))[1]  # gone: answered at once, not waited for
        assert isinstance(again, Failure) and "its process ended" in again.reason
    finally:
        t.close()


def test_a_bad_table_is_blamed_on_its_client_with_the_file(tmp_path):
    """Every client process read every table, so client 1's bad file was reported by client 0 (and a binary
    file without its name)."""
    good, bad = tmp_path / "a.csv", tmp_path / "b.csv"
    good.write_text("x,y\n1,2\n2,3\n3,5\n")
    bad.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(Exception) as e:
        fs.solve(get_problem("table", tables=(str(good), str(bad))), method="gn", clients=2, rounds=1,
                 engine="processes")
    assert str(e.value).startswith("client 1: ValueError: ") and "b.csv: not a UTF-8 text CSV table" in str(e.value)


def test_the_timeout_setting_is_checked(monkeypatch):
    monkeypatch.setenv("FEDSCIML_PROCESSES_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="FEDSCIML_PROCESSES_TIMEOUT must be a number of seconds > 0, got 'soon'"):
        processes.reply_timeout()
    monkeypatch.setenv("FEDSCIML_PROCESSES_TIMEOUT", "2.5")
    assert processes.reply_timeout() == 2.5


# --- finding 10: clock cpu ----------------------------------------------------------------------------------


class _Elsewhere(Transport):
    """In-process clients that say they spent ``per_ask`` CPU seconds elsewhere at each ask."""

    def __init__(self, inner: LocalTransport, per_ask):
        self.inner, self.per_ask, self.spent = inner, per_ask, 0.0
        self.client_ids, self.sample_counts = inner.client_ids, inner.sample_counts

    def ask(self, client_ids, request):
        self.spent += self.per_ask or 0.0
        return self.inner.ask(client_ids, request)

    def cpu_seconds(self):
        return None if self.per_ask is None else self.spent


def _sim(per_ask):
    from fedsciml.runtime.client import Client

    problem = get_problem("bratu", n_interior=20)
    objs = problem.client_objectives(2, seed=0)
    transport = _Elsewhere(LocalTransport([Client(i, o) for i, o in enumerate(objs)]), per_ask)
    return Simulation(transport, problem.evaluate, RoundConfig(rounds=1, clock="cpu"))


def test_clock_cpu_counts_the_clients_cpu_or_is_refused():
    """``--clock cpu`` on engine processes counted the server's CPU only (0.21 s against 10.30 s in process)."""
    sim = _sim(100.0)
    t0 = sim.rec.elapsed()
    sim.transport.ask([0], Request("loss", {"theta": get_problem("bratu", n_interior=20).init_params(0)}))
    assert sim.rec.elapsed() - t0 >= 100.0  # the clients' 100 s count on the solver clock
    with pytest.raises(ValueError, match="clients run in processes that do not report theirs; use clock='wall'"):
        _sim(None)
    with pytest.raises(ValueError, match="engine 'flower' runs its clients in processes whose CPU it cannot read"):
        plan(get_problem("bratu", n_interior=20), "gn", clients=2, rounds=1, engine="flower", clock="cpu")
    rec = Recorder(lambda th: {}, 1, clock="cpu", cpu_elsewhere=lambda: 5.0)
    assert rec.elapsed() < 1.0  # what was spent before the recorder started is not the run's


def test_the_summary_says_which_clock_its_seconds_are():
    from fedsciml.runtime.results import summary_lines

    cpu = fs.solve(get_problem("bratu", n_interior=20), method="gn", clients=2, rounds=1, clock="cpu")
    head = summary_lines([cpu])[2]
    assert "cpu s" in head and "seconds" not in head
    wall = fs.solve(get_problem("bratu", n_interior=20), method="gn", clients=2, rounds=1)
    assert "wall s" in summary_lines([wall])[2]


# --- finding 8: the rest ---------------------------------------------------------------------------------------


def test_a_million_clients_in_one_process_is_one_line():
    """``ridge --clients 1000000 --dim 5`` passed the memory check (1 GB) and ran for hours (6 ms a client)."""
    with pytest.raises(ValueError, match=r"clients=1,000,000 in one process: .* at most 100,000 clients here"):
        plan(get_problem("ridge-linear", dim=5, n_samples=20), "one-shot", clients=10**6)


def test_a_full_rank_matrix_free_sketch_is_refused():
    """``--rank 100000 --sketch matfree`` was capped at p and then took p + 10 products a client a round (hung)."""
    with pytest.raises(OptionError, match=r"rank 100000 with sketch matfree: the model has 2,209 parameters"):
        fs.solve(get_problem("bratu", n_interior=10), method="fipa", clients=2, rounds=1, rank=100000,
                 sketch="matfree")


def test_flower_run_refuses_a_config_without_a_value():
    from fedsciml.engines.flower.launch import check_config_value, flower_run

    with pytest.raises(ValueError, match=r"'num-supernodes=' is not key=value with a key and a value"):
        flower_run("app", federation_config=["num-supernodes="], flwr="/nonexistent/flwr")
    with pytest.raises(ValueError, match="--run-config is empty"):
        check_config_value("--run-config", "  ")
    check_config_value("--federation-config", "num-supernodes=4 options.backend.client-resources.num-cpus=1")
    check_config_value("--run-config", "config.toml")


_DOMAIN_FAULTS = {
    "exact": (lambda self, x: torch.zeros(x.shape[0], 3), r"its reference has 3 value column\(s\); its outputs"),
    "T": ("abc", r"T must be a finite number \(the time interval \[t0, T\]\), got 'abc'"),
    "conditions": (None, r"dirichlet:x-: its value function failed on \d+ points: ZeroDivisionError"),
    "equation": (lambda self, u, x: (u(x)[0], u(x)[0]), r"equation\(u, x\) failed at the point .*IndexError"),
    "reference": (lambda self: (torch.rand(4, 1), torch.rand(7)), r"reference\(\) gave 4 points and 7 values"),
}


@pytest.mark.parametrize("hook", list(_DOMAIN_FAULTS))
def test_domain_pde_faults_are_one_line(hook):
    """Five DomainPDE faults that gave torch's or Python's raw error (found by the battery's issue38b group)."""
    from fedsciml.problems.base import ProblemError
    from fedsciml.problems.conditions import Dirichlet
    from fedsciml.problems.geometry import Interval

    value, message = _DOMAIN_FAULTS[hook]
    attrs = dict(name="issue38-domain", geometry=Interval(0.0, 1.0),
                 conditions=[Dirichlet("x-", 0.0), Dirichlet("x+", 0.0)],
                 equation=lambda self, u, x: -u.laplacian(x) - 1.0)
    attrs[hook] = value if hook != "conditions" else [Dirichlet("x-", lambda x: 1 / 0)]
    with pytest.raises(ProblemError, match=message) as e:
        fs.solve(type("Faulty", (fs.DomainPDE,), attrs)(n_interior=10, n_boundary=4), method="gn", clients=2,
                 rounds=1)
    assert "\n" not in str(e.value)
