"""A new federated method is one file (examples/fedavg_lr_schedule.py: FedAvg with a server learning-rate schedule)
plus this test: registered by loading the file, run by the driver from Python and from the command line, its
settings text in the summary table — nothing else edited."""
import dataclasses

import pytest
import torch

import fedsciml as fs
from fedsciml.cli import main
from fedsciml.runtime.driver import METHODS

from _examples import EXAMPLES, load_example

SMALL = dict(clients=2, problem_options={"n_interior": 40}, local_steps=5)


@pytest.fixture
def decay():
    mod = load_example("fedavg_lr_schedule", "fedavg_lr_schedule_test")
    yield mod
    METHODS.pop("fedavg-decay", None)  # the registry is the process's: leave it as it was


def test_the_file_registers_the_method(decay):
    assert METHODS["fedavg-decay"].config is decay.FedAvgDecayConfig
    assert [decay.DecayStrategy.step_size(s, k) for s in [decay.DecayStrategy(None, None, 0, 1.0, 0.5, 2)]
            for k in range(1, 6)] == [1.0, 1.0, 0.5, 0.5, 0.25]


def test_without_decay_it_is_fedavg_bit_for_bit(decay):
    """lr_decay = 1: η_k = server_lr · 1 exactly, the same aggregator and loop: the same operations as FedAvg."""
    a = fs.solve("bratu", method="fedavg-decay", rounds=3, lr_decay=1.0, **SMALL)
    b = fs.solve("bratu", method="fedavg", rounds=3, **SMALL)
    assert torch.equal(a.theta, b.theta)
    assert [r["loss"] for r in a.history] == [r["loss"] for r in b.history]


def test_the_schedule_acts_from_its_first_decay(decay):
    one = [fs.solve("bratu", method=m, rounds=1, **SMALL, **kw).theta
           for m, kw in (("fedavg-decay", {"lr_decay": 0.5, "decay_every": 1}), ("fedavg", {}))]
    assert torch.equal(*one)  # round 1: η_1 = server_lr
    two = [fs.solve("bratu", method=m, rounds=2, **SMALL, **kw).theta
           for m, kw in (("fedavg-decay", {"lr_decay": 0.5, "decay_every": 1}), ("fedavg", {}))]
    assert not torch.equal(*two)  # round 2: η_2 = server_lr / 2


def test_from_the_command_line_with_its_flags_and_settings(decay, capsys):
    rc = main(["--plugin", str(EXAMPLES / "fedavg_lr_schedule.py"), "solve", "bratu", "--clients", "2",
               "--method", "fedavg-decay", "--rounds", "2", "--lr-decay", "0.25", "--decay-every", "1",
               "--local-steps", "5", "--n-interior", "40", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "η=1.0·0.25^⌊(k−1)/1⌋" in out and "fedavg-decay" in out
    assert main(["solve", "bratu", "--clients", "2", "--method", "fedavg-decay", "--lr-decay", "2", "--quiet"]) == 2


def test_every_built_in_method_is_one_module():
    """The built-in methods follow the same pattern: each registry entry's configuration, strategy factory (or
    runner) and settings text are declared in one module of fedsciml.methods, whose METHOD_ENTRIES registers it;
    fedsciml.methods registers those entries and defines none itself."""
    import fedsciml.methods as methods

    seen = []
    for module in methods._MODULES:
        for entry in module.METHOD_ENTRIES:
            spec = METHODS[entry.name]
            # registered as declared; another task kind (images: add_kind, when fedsciml.images was imported
            # earlier in this process) may have added its own use since
            added = set(spec.kinds) - set(entry.kinds)
            assert added <= {"images"}, (entry.name, added)
            assert dataclasses.replace(spec, kinds=entry.kinds, uses=entry.uses) == entry
            home = module.__name__
            what = spec.strategy if spec.strategy is not None else spec.run  # a strategy factory, or centralized's run
            assert spec.config.__module__ == home and what.__module__ == home, entry.name
            if spec.settings is not None:  # its own text, or the registry's default (the local solver's)
                where = spec.settings.partition(":")[0] if isinstance(spec.settings, str) else spec.settings.__module__
                assert where in (home, "fedsciml.methods.local"), entry.name
            seen.append(entry.name)
    # every problem method whose configuration fedsciml.methods declares is one of those entries, once
    ours = {n for n, s in METHODS.items()
            if (s.strategy or s.run) is not None and s.config.__module__.startswith("fedsciml.methods.")}
    assert sorted(seen) == sorted(ours) and "gn" in ours
