"""Image methods on the one runtime: checkpoints/resume, the method registry, the Result layout, and
curvature as the currency (every form's message round trip and float count)."""
import json
import os

import pytest
import torch

from fedsciml.core import curvature as C
from fedsciml.runtime import checkpoint as ckpt
from fedsciml.core.schema import Schema, floats_in
from fedsciml.images import data as D
from fedsciml.images import fisher as fz
from fedsciml.images import methods as M
from fedsciml.images.models import FlatModel, build


def _fed(C=4, seed=0):
    return D.federate(D.load("digits"), C, 0.5, seed=seed)


CFG = M.TrainConfig(epochs=1, rank=2, oversample=2, power_iters=1)


def _rows(r):
    return [{k: v for k, v in row.items() if k != "time_s"} for row in r.rows]  # time_s: wall clock


# ------------------------------------------------------------------ checkpoints / resume
@pytest.mark.parametrize("warmup", [0, 1])
def test_resumed_image_rounds_equal_the_straight_run_bitwise(tmp_path, warmup):
    """N rounds straight vs N/2, then resumed to N: the resumed run performs the same operations in the same
    order (θ, the dropout RNG, FedFish's and server-Adam FedAvg's Adam moments and step, the enrolled sample
    counts come from the checkpoint; cohorts and client seeds are functions of the seed and the round), so
    the history (every field but the wall-clock time_s) and the final parameters are bitwise equal."""
    fed = _fed()
    methods = ["fedavg", "fedprox", "fipa", "fipa-fc", "fedfish"]
    kw = dict(warmup=warmup, participation=0.75, dropout=0.3)
    straight = M.run_rounds(fed, "linear", methods, 0, CFG, rounds=4, **kw)
    half = M.run_rounds(fed, "linear", methods, 0, CFG, rounds=2, checkpoint=str(tmp_path), **kw)
    resumed = M.run_rounds(fed, "linear", methods, 0, CFG, rounds=4, checkpoint=str(tmp_path), resume=True, **kw)
    assert set(straight) == set(resumed) == set(methods) | ({"warmup"} if warmup else set())
    for m in methods:
        assert len(half[m].rows) == 3 and len(resumed[m].rows) == 5
        assert _rows(resumed[m]) == _rows(straight[m]), m
        assert torch.equal(resumed[m].theta, straight[m].theta), m
        assert resumed[m].info == straight[m].info and resumed[m].floats_per_client == straight[m].floats_per_client
        assert resumed[m].run["resumed"] and not straight[m].run["resumed"]
    assert os.path.isfile(tmp_path / "seed0" / "fedfish" / "state.pt")
    # the server Adam's state really is in the checkpoint (moments and step after 4 rounds)
    st = ckpt.read(str(tmp_path / "seed0" / "fedfish" / "state.pt"))
    assert float(st["strategy"]["aggregator"]["adam"]["step"]) == 4 and st["round"] == 4


def test_server_adam_fedavg_resumes_bitwise(tmp_path):
    fed = _fed(3)
    cfg = M.TrainConfig(epochs=1, server_opt="adam")
    straight = M.run_rounds(fed, "linear", ["fedavg"], 1, cfg, rounds=3)
    M.run_rounds(fed, "linear", ["fedavg"], 1, cfg, rounds=1, checkpoint=str(tmp_path))
    resumed = M.run_rounds(fed, "linear", ["fedavg"], 1, cfg, rounds=3, checkpoint=str(tmp_path), resume=True)
    assert _rows(resumed["fedavg"]) == _rows(straight["fedavg"])
    assert torch.equal(resumed["fedavg"].theta, straight["fedavg"].theta)


def _bench(tmp_path, *extra):
    return ["bench", "images", "--protocol", "rounds", "--model", "linear", "--methods", "fedfish", "--clients", "3",
            "--epochs", "1", "--quiet", "--checkpoint", str(tmp_path / "ck"), *extra]


def test_cli_hostile_or_corrupt_image_checkpoint_is_one_line(tmp_path, capsys):
    from fedsciml.cli import main

    assert main(_bench(tmp_path, "--rounds", "1")) == 0
    state = tmp_path / "ck" / "seed0" / "fedfish" / "state.pt"
    good = state.read_bytes()
    capsys.readouterr()
    # 1. a modified byte: the checksum fails
    state.write_bytes(good[:-10] + bytes(10))
    assert main(_bench(tmp_path, "--rounds", "2", "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "corrupt" in err and str(state) in err
    # 2. garbage
    state.write_bytes(b"not a checkpoint at all")
    assert main(_bench(tmp_path, "--rounds", "2", "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a fedsciml checkpoint" in err
    # 3. a valid checksum over a pickle that would run code: refused by weights_only, nothing runs
    import hashlib
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))
    payload = pickle.dumps({"x": Evil()})
    state.write_bytes(ckpt.MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    assert main(_bench(tmp_path, "--rounds", "2", "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refused" in err and not (tmp_path / "pwned").exists()
    # 4. a well-formed checkpoint whose strategy state is the wrong structure
    state.write_bytes(good)
    bad = ckpt.read(str(state))
    bad["strategy"]["aggregator"]["adam"] = {"step": 3}
    ckpt.save(str(state.parent), bad)
    assert main(_bench(tmp_path, "--rounds", "2", "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "malformed" in err
    # 5. other settings than the run that wrote it: the first difference is named
    state.write_bytes(good)
    assert main(_bench(tmp_path, "--rounds", "2", "--resume", "--epochs", "2")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different run" in err and "train" in err
    # 6. --resume without --checkpoint, and on the one-shot protocol
    assert main(["bench", "images", "--protocol", "rounds", "--resume", "--quiet"]) == 2
    assert "--resume needs --checkpoint" in capsys.readouterr().err
    assert main(["bench", "images", "--checkpoint", str(tmp_path / "x"), "--quiet"]) == 2
    assert "apply to --protocol rounds and warmup-refine" in capsys.readouterr().err


# ------------------------------------------------------------------ registry
def test_image_methods_come_from_one_registry():
    """The image methods are entries of the one method registry (fedsciml.runtime.driver.METHODS) under the kind
    ``images``, each with its protocols; fedavg, fedprox and fipa are one entry for problems and images alike."""
    from fedsciml.runtime.driver import METHODS, available_methods, get_method

    assert set(M.ONE_SHOT) | set(M.MULTI_ROUND) <= set(available_methods("images"))
    for name in set(M.ONE_SHOT) | set(M.MULTI_ROUND):
        spec = METHODS[name]
        assert "images" in spec.kinds
        for proto, im in spec.uses["images"].detail.items():
            assert im.name == name and im.protocol == proto and callable(im.aggregator) and callable(im.message)
            assert (name in M.ONE_SHOT) if proto == "one-shot" else (name in M.MULTI_ROUND)
    for name in ("fedavg", "fedprox", "fipa"):  # one entry: solve's method and the image one
        assert METHODS[name].kinds == ("pinn", "fit", "ridge", "images")
    assert METHODS["regmean"].kinds == ("images",) and "gn" not in available_methods("images")
    assert M.image_method("fedbens", "one-shot").modes and M.image_method("fipa-fc", "rounds").head_only
    assert M.default_methods("one-shot") == list(M.ONE_SHOT[:6])
    assert M.default_methods("warmup-refine") == list(M.MULTI_ROUND)
    with pytest.raises(ValueError, match=r"method 'fishermerge' is a one-shot image method, not a multi-round one "
                                         r"\(image benchmarks\); multi-round methods: fedavg, fedprox, fipa, fipa-fc, "
                                         r"fedfish"):
        M.image_method("fishermerge", "rounds")
    with pytest.raises(ValueError, match=r"method 'fipa' is a multi-round image method, not a one-shot one "
                                         r"\(image benchmarks\); one-shot methods: fedavg, fishermerge"):
        M.run_one_shot(_fed(3), "linear", ["fipa"], 0, CFG)
    with pytest.raises(ValueError, match=r"unknown one-shot method 'nope' \(image benchmarks\)"):
        M.image_method("nope", "one-shot")
    # a method used on the wrong kind: one line each way
    with pytest.raises(ValueError, match=r"method 'gn' does not apply to image classification .*it applies to: "
                                         r"pinn, fit, ridge; methods that do: .*regmean"):
        M.image_method("gn", "rounds")
    with pytest.raises(ValueError, match=r"method 'regmean' does not apply to a problem of kind 'pinn'; it applies "
                                         r"to: images; methods that do: centralized, .*gn"):
        get_method("regmean", "pinn")


def test_wrong_kind_is_one_line_on_the_cli(capsys):
    from fedsciml.cli.main import main

    assert main(["solve", "bratu", "--clients", "2", "--method", "regmean"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "method 'regmean' does not apply to a problem of kind 'pinn'" in err
    assert main(["bench", "images", "--protocol", "rounds", "--methods", "gn", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "method 'gn' does not apply to image classification" in err


def test_one_shot_and_rounds_run_through_the_one_driver(monkeypatch):
    """run_one_shot / run_rounds call fedsciml.runtime.driver.solve once per method run (warm-up included), on an
    ImageTask, and return the same accounting."""
    from fedsciml.runtime import driver

    calls = []
    real = driver.solve

    def spy(problem, method, *a, **kw):
        calls.append((type(problem).__name__, method, kw["config"].protocol))
        return real(problem, method, *a, **kw)

    monkeypatch.setattr(M, "solve", spy)
    fed = _fed(3)
    out = M.run_rounds(fed, "linear", ["fedavg", "fipa"], 0, CFG, 1, warmup=1)
    assert calls == [("ImageTask", "fedavg", "rounds"), ("ImageTask", "fedavg", "rounds"),
                     ("ImageTask", "fipa", "rounds")]
    assert list(out) == ["warmup", "fedavg", "fipa"] and [h[0] for h in out["fipa"].history] == [2]
    calls.clear()
    one = M.run_one_shot(fed, "linear", ["fedavg", "regmean"], 0, CFG)
    assert calls == [("ImageTask", "fedavg", "one-shot"), ("ImageTask", "regmean", "one-shot")]
    assert 0 <= one["regmean"].accuracy <= 1 and one["regmean"].n_params == out["fipa"].n_params


# ------------------------------------------------------------------ one Result type
def test_cli_done_when_command_writes_results_with_per_round_accounting(tmp_path, capsys):
    """The issue's command (smaller: 4 clients, a linear model): `bench images --protocol rounds --methods
    fedavg,fipa --rounds 2 --dropout 0.3 --json i.json` — `runs` holds one Result per method in solve's
    layout; each history row records the floats sent and the dropped and rejected clients."""
    from fedsciml.cli import main
    from fedsciml.runtime.results import Result

    out = tmp_path / "i.json"
    assert main(["bench", "images", "--protocol", "rounds", "--methods", "fedavg,fipa", "--rounds", "2",
                 "--dropout", "0.3", "--model", "linear", "--clients", "4", "--epochs", "1", "--json", str(out),
                 "--quiet"]) == 0
    res = json.loads(out.read_text())
    assert set(res) >= {"setting", "results", "runs", "wall_s"}  # the earlier keys are kept
    runs = [Result.from_dict(d) for d in res["runs"]]
    assert [r.method for r in runs] == ["fedavg", "fipa"]
    for r, d in zip(runs, res["runs"]):
        assert set(d) == (set(Result.__dataclass_fields__) - {"theta"}) | {"schema_version"}
        assert r.problem == "images-digits" and r.clients == 4 and r.n_params == 650
        assert r.final["accuracy"] == res["results"][r.method]["acc_mean"]
        assert [h["round"] for h in r.history] == [0, 1, 2]
        sent = 0
        for h in r.history[1:]:
            assert len(h["dropped_clients"]) == h["dropped"] and len(h["rejected_clients"]) == h["rejected"]
            assert h["dropped"] + h["rejected"] + h["answered"] == 4
            sent += h["floats_up"] + h["floats_down"]
            assert h["floats_sent"] == sent  # cumulative, as solve's
        assert r.extra["rejections"] == [] and r.extra["stopped_by"] == "rounds" and r.stop_reason == "rounds"
    assert sum(h["dropped"] for r in runs for h in r.history[1:]) > 0  # seeded: dropout 0.3 over 16 client-rounds
    assert "fipa" in capsys.readouterr().out


# ------------------------------------------------------------------ curvature as the currency
def _kfac(arch: str = "lenet5"):
    fed = _fed(2)
    m = FlatModel(build(arch, fed.shape, fed.n_classes, 0))
    x = fed.clients[0][0][:16]
    return m, fz.kfac(m, m.theta(), x)


def test_every_curvature_form_round_trips_its_message_bitwise_and_counts_its_floats():
    """Bitwise (the same tensors back, the same operations on them): the message, the dense form and a product.
    LeNet-5's K-FAC (p = 21,386: convolutions and linear layers) is compared by its message and products, not by
    its dense form (3.7 GB, 14 CPU-s a copy: this test took 213 s in the suite); the linear model's K-FAC
    (p = 650) is compared densely too."""
    torch.manual_seed(0)
    p = 9
    A = torch.randn(p, p, dtype=torch.float64)
    U = torch.linalg.qr(torch.randn(p, 3, dtype=torch.float64))[0]
    S = A @ A.T
    S = (S + S.T) / 2  # exactly symmetric (A @ A.T is not, on every CPU): a packed triangle must restore all of it
    forms = [C.Dense(S), C.LowRank(U, torch.tensor([3.0, 2.0, 0.5], dtype=torch.float64)),
             C.Diagonal(torch.rand(p, dtype=torch.float64))]
    model, K = _kfac()
    small, K_small = _kfac("linear")
    forms += [K, K_small]
    for c in forms:
        msg = c.to_message()
        back = type(c).from_message(msg, layout=c if isinstance(c, fz.KFAC) else None)
        assert c.n_floats == floats_in(msg)  # what the loop counts for these fields
        if c is not K:
            assert torch.equal(back.to_dense(), c.to_dense()), type(c).__name__  # bitwise: the same tensors
        assert all(torch.equal(a, b) for a, b in zip(back.to_message().values(), msg.values()))
        for _ in range(2 if c is K else 1):
            vv = torch.randn(c.p) if isinstance(c, fz.KFAC) else torch.randn(p).double()
            assert torch.equal(back.matvec(vv), c.matvec(vv))
        fields = type(c).fields(c) if isinstance(c, fz.KFAC) else type(c).fields()
        Schema(fields).validate(msg, 0, p=c.p)  # the form's own message satisfies its declared schema
    assert forms[0].n_floats == p * (p + 1) // 2 and forms[1].n_floats == p * 3 + 3 and forms[2].n_floats == p
    with pytest.raises(ValueError, match="layout"):
        fz.KFAC.from_message(K.to_message())


def test_n_floats_equals_what_the_loop_counts_for_image_messages():
    """The floats the round loop counted per answering client are the delta, the count and the curvature's
    ``n_floats`` (FIPA: LowRank; FedFish: Diagonal; FedFisher-K-FAC: the K-FAC message)."""
    fed = _fed(3)
    res = M.run_rounds(fed, "linear", ["fipa", "fedfish"], 0, CFG, rounds=1)
    p = 650
    low = C.LowRank(torch.zeros(p, CFG.rank), torch.zeros(CFG.rank)).n_floats
    for m, curv in (("fipa", low), ("fedfish", C.Diagonal(torch.zeros(p)).n_floats)):
        row = res[m].rows[1]
        assert row["floats_up"] == row["answered"] * (p + 1 + curv), m
    one = M.run_one_shot(fed, "linear", ["fedfisher-kfac"], 0, M.TrainConfig(epochs=1, fedfisher_steps=2))
    model = FlatModel(build("linear", fed.shape, fed.n_classes, 0))
    K = fz.kfac(model, model.theta(), fed.x_val[:2])
    assert one["fedfisher-kfac"].floats_per_client == p + 1 + K.n_floats
    assert one["fedfisher-kfac"].rows[1]["floats_up"] == 3 * (p + 1 + K.n_floats)


# ------------------------------------------------------------------ progress
def test_long_training_and_local_steps_show_progress_in_the_log_never_print(caplog, capsys, monkeypatch):
    """A long loop (an image client's epochs, a client's local Adam steps) reports progress through the logger
    fedsciml.progress (here: a line per step, log_every=0; by default every 30 s, so a short loop says nothing)
    and prints nothing; the numbers are those of the same loop without progress (bitwise: same operations)."""
    import logging

    from fedsciml.runtime import history
    from fedsciml.methods.local import LocalConfig, adam_delta
    from fedsciml.runtime.client import Client
    from fedsciml.core.objective import LinearLeastSquares

    fed = _fed(2)
    model = FlatModel(build("linear", fed.shape, fed.n_classes, 0))
    x, y = fed.clients[0]
    quiet = M.local_train(model, model.theta(), x, y, CFG, seed=3, epochs=2)
    assert not caplog.records  # default: a line only every 30 s
    monkeypatch.setitem(history.Progress.__init__.__kwdefaults__, "log_every", 0.0)
    with caplog.at_level(logging.INFO, logger="fedsciml.progress"):
        loud = M.local_train(model, model.theta(), x, y, CFG, seed=3, epochs=2, label="client 0 training")
        torch.manual_seed(0)
        A, b = torch.randn(20, 3, dtype=torch.float64), torch.randn(20, dtype=torch.float64)
        adam_delta(Client(0, LinearLeastSquares(A, b)), torch.zeros(3, dtype=torch.float64), LocalConfig(steps=3))
    assert torch.equal(quiet, loud)
    lines = [r.getMessage() for r in caplog.records if r.name == "fedsciml.progress"]
    want = [f"client 0 training: {i}/2 epochs" for i in (1, 2)] + [f"client 0 local adam: {i}/3 steps" for i in (1, 2, 3)]
    assert [ln.split(" (")[0].strip() for ln in lines] == want
    assert capsys.readouterr().out == ""


def test_quiet_silences_the_long_loops_progress(caplog, capsys, monkeypatch):
    """--quiet ('no progress lines') reaches the long loops too: within history.loop_progress(False), the solve and
    bench images commands' --quiet, a client's local Adam steps report nothing (log_every=0: otherwise a line per
    step), the numbers unchanged (bitwise: same operations); the switch is restored after the block."""
    import logging

    from fedsciml.cli.main import main
    from fedsciml.runtime import history
    from fedsciml.methods.local import LocalConfig, adam_delta
    from fedsciml.runtime.client import Client
    from fedsciml.core.objective import LinearLeastSquares

    monkeypatch.setitem(history.Progress.__init__.__kwdefaults__, "log_every", 0.0)
    torch.manual_seed(0)
    A, b = torch.randn(20, 3, dtype=torch.float64), torch.randn(20, dtype=torch.float64)
    theta = torch.zeros(3, dtype=torch.float64)
    with caplog.at_level(logging.INFO, logger="fedsciml.progress"):
        with history.loop_progress(False):
            quiet = adam_delta(Client(0, LinearLeastSquares(A, b)), theta, LocalConfig(steps=3))
        assert not [r for r in caplog.records if r.name == "fedsciml.progress"]
        loud = adam_delta(Client(0, LinearLeastSquares(A, b)), theta, LocalConfig(steps=3))
        assert len([r for r in caplog.records if r.name == "fedsciml.progress"]) == 3  # restored after the block
    assert torch.equal(quiet, loud)
    argv = ["solve", "sin1d", "--clients", "2", "--n-samples", "20", "--method", "fedavg", "--rounds", "1",
            "--local-steps", "3"]
    assert main(argv) == 0  # the CLI's log goes to stderr (the logger fedsciml does not propagate)
    assert "client 1 local adam: 3/3 steps" in capsys.readouterr().err
    assert main(argv + ["--quiet"]) == 0
    assert "local adam" not in capsys.readouterr().err


def test_the_driver_checks_an_image_run_s_memory_once_before_it_starts(monkeypatch):
    """The image runs go through the driver's memory check: the clients' images plus one round's messages."""
    from fedsciml.runtime import driver

    fed = _fed(3)
    calls = []

    def avail(device=None):
        calls.append(device)
        return 1000.0  # bytes

    monkeypatch.setattr(driver, "available_memory", avail)
    with pytest.raises(driver.OutOfMemory, match=r"images with fipa \(.* image floats \+ 3 client\(s\) × 650 "
                                                 r"parameters × 4 × 4 bytes\)"):
        M.run_rounds(fed, "linear", ["fipa"], 0, CFG, 1)
    with pytest.raises(driver.OutOfMemory, match=r"images with regmean .* × 3 × 4 bytes"):
        M.run_one_shot(fed, "linear", ["regmean"], 0, CFG)
    assert len(calls) == 2  # once per run


def test_bench_images_flags_are_generated_from_the_declarations(capsys):
    """Every option of bench images is declared once (BenchImagesOptions) and its flag, help, allowed values and
    default come from there (the generator solve uses); a value out of range is refused by the declaration."""
    from fedsciml.cli.main import main
    from fedsciml.images.bench import BenchImagesOptions

    with pytest.raises(SystemExit):
        main(["bench", "images", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    specs = BenchImagesOptions.specs()
    assert len(specs) == 28  # 25, and --robust, --trim, --clip-norm (issue 31)
    for name, (default, spec) in specs.items():
        flag = "--" + name.replace("_", "-")
        assert flag in text and " ".join(spec.help.split())[:40] in text, name
    assert "--rank N FIPA: eigenpairs per client [an integer ≥ 1; default 10]" in text
    assert main(["bench", "images", "--rank", "0", "--methods", "fipa", "--protocol", "rounds", "--quiet"]) == 2
    assert "bench images option --rank must be an integer ≥ 1, got 0" in capsys.readouterr().err
    assert main(["bench", "images", "--iid", "--alpha", "0.5", "--quiet"]) == 2
    assert "--iid and --alpha exclude each other" in capsys.readouterr().err


def test_bench_images_refuses_participation_one_shot_and_split_with_iid():
    """An option that acts on nothing this run does is refused in one line naming it (not silently ignored):
    --participation with the one-shot protocol (the exchange asks every client), --split with --iid (an IID
    split has no Dirichlet kind).  Their defaults, and the options where they act, pass."""
    from fedsciml.images.bench import BenchImagesOptions
    from fedsciml.options import OptionError

    with pytest.raises(OptionError, match=r"participation has no effect here: .*one-shot exchange asks every"):
        BenchImagesOptions.from_options({"participation": 0.5})
    with pytest.raises(OptionError, match=r"split has no effect here: .*iid splits IID"):
        BenchImagesOptions.from_options({"iid": True, "split": "hsu"})
    assert BenchImagesOptions.from_options({"protocol": "rounds", "participation": 0.5}).participation == 0.5
    assert BenchImagesOptions.from_options({"iid": True, "participation": 1.0, "split": "balanced"}).iid
    assert BenchImagesOptions.from_options({"split": "hsu"}).split == "hsu"


def test_a_multi_round_image_run_of_zero_rounds_is_refused_not_reported_as_nan():
    """run_rounds(rounds=0) ran no round and reported the accuracy NaN as its result; now one line naming the
    option and what is allowed."""
    from fedsciml.options import OptionError

    with pytest.raises(OptionError, match=r"images option rounds must be an integer ≥ 1, got 0"):
        M.run_rounds(_fed(2), "linear", ["fedavg"], 0, CFG, 0)


def test_head_only_methods_are_refused_where_clients_are_remote():
    """Which image methods a remote client cannot run is read from the declarations (``head_only``), not from a name
    an engine spells: the default multi-round set and an explicit list name FIPA-FC, one-shot protocols and lists
    without it pass, and a run on a remote transport is refused before any client is asked."""
    from fedsciml.runtime.transport import Transport

    head = [n for n in M.MULTI_ROUND if M.image_method(n, "rounds").head_only]
    assert head == ["fipa-fc"]
    for methods in (None, ["fedavg", "fipa-fc"]):
        line = M.remote_refusal("rounds", methods, "engine 'x'")
        assert line is not None and line.startswith("engine 'x' does not run fipa-fc (") and "\n" not in line
        assert "e.g. fedavg,fedprox,fipa,fedfish" in line
    assert M.remote_refusal("warmup-refine", None) is not None
    assert M.remote_refusal("rounds", ["fedavg", "fipa"]) is None and M.remote_refusal("one-shot", None) is None

    class Remote(Transport):  # never asked: the refusal comes first
        client_ids, sample_counts, described = [0, 1, 2], {}, {}

    with pytest.raises(ValueError, match=r"a remote transport does not run fipa-fc .*in-process engine\)$"):
        M.run_rounds(_fed(3), "linear", ["fipa-fc"], 0, CFG, 1, transport=Remote())
