"""PNG plots of runs (solution vs exact, error vs time and steps) for field and non-field problems."""
import os

import pytest

from fedsciml.runtime.plotting import plot_runs, run_label
from fedsciml.problems import get_problem
from fedsciml.runtime.results import Result

PNG = b"\x89PNG\r\n\x1a\n"


def fake_result(problem, method="centralized", theta=None, metric="rel_l2", optimizer="lm"):
    rows = [{"step": s, "time_s": 0.1 * s, "loss": 10.0 ** -s, metric: 10.0 ** (-s / 2), "floats_sent": 100 * s}
            for s in range(6)]
    return Result(problem=problem.name if hasattr(problem, "name") else str(problem), method=method,
                  options={"optimizer": optimizer}, seed=0, device="cpu", dtype="float64", n_params=3, clients=2,
                  final={"loss": rows[-1]["loss"], metric: rows[-1][metric]}, history=rows, theta=theta)


def assert_pngs(paths, names):
    assert sorted(os.path.basename(p) for p in paths) == sorted(names)
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == PNG
        assert os.path.getsize(p) > 5000


@pytest.mark.parametrize("name,opts", [("bratu", {}), ("poisson", {"dim": 3})])
def test_field_problem_writes_solution_and_convergence_plots(tmp_path, name, opts):
    pb = get_problem(name, **opts)
    metric = "mse" if pb.metric == "mse" else "rel_l2"
    results = [fake_result(pb, theta=pb.init_params(0), metric=metric), fake_result(pb, "fipa", metric=metric)]
    paths = plot_runs(pb, results, str(tmp_path / "out"))
    assert_pngs(paths, ["solution.png", "error_vs_time.png", "error_vs_step.png", "error_vs_floats.png"])


def test_non_field_problem_skips_the_solution_plot(tmp_path):
    class Ridge:  # what a ridge problem looks like to the plotter: no field, no network
        name = "ridge-linear"
        kind = "ridge"

    results = [fake_result(Ridge(), "fusion", metric="mse"), fake_result(Ridge(), "fedavg", metric="mse")]
    paths = plot_runs(Ridge(), results, str(tmp_path))
    assert_pngs(paths, ["error_vs_time.png", "error_vs_step.png", "error_vs_floats.png"])


def test_runs_without_parameters_or_history_do_not_crash(tmp_path):
    pb = get_problem("allen-cahn")
    r = fake_result(pb)
    r.history = []
    assert plot_runs(pb, [r], str(tmp_path)) == []
    rounds = fake_result(pb, "gn")
    rounds.history = [{"round": k, "time_s": k, "rel_l2": 1.0 / (k + 1), "loss": float("nan")} for k in range(4)]
    assert_pngs(plot_runs(pb, [rounds], str(tmp_path)), ["error_vs_time.png", "error_vs_step.png"])


def test_run_labels_name_the_centralized_optimizer():
    pb = get_problem("bratu")
    assert run_label(fake_result(pb, optimizer="adam")) == "centralized/adam"
    assert run_label(fake_result(pb, "fipa")) == "fipa"


# ------------------------------------------------------------------ issue 30: plots on the problem's own domain
import logging  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import fedsciml as fs  # noqa: E402
from fedsciml.problems.conditions import Dirichlet  # noqa: E402
from fedsciml.problems.geometry import Disk  # noqa: E402
from fedsciml.runtime.plotting import solution_figures  # noqa: E402


class Annulus(fs.DomainPDE):
    """−Δu = 0 between r = ½ and r = 1 (a disk with a hole), u = 1 + log₂ r."""
    name = "test-annulus"
    geometry = Disk((0.0, 0.0), 1.0) - Disk((0.0, 0.0), 0.5)
    hidden = (8,)
    conditions = [Dirichlet("boundary", lambda x: 1 + torch.log2(x.norm(dim=1)))]

    def equation(self, u, x):
        return u.laplacian(x)

    def exact(self, x):
        return 1 + torch.log2(x.norm(dim=1))


def _drawn_masks(fig):
    """The blank (masked) cells of every map the figure draws (the fine RGBA edge overlays aside)."""
    return [np.ma.getmaskarray(im.get_array()) for ax in fig.axes for im in ax.images if im.get_array().ndim == 2]


@pytest.mark.parametrize("make,area", [(lambda: get_problem("poisson-lshape"), 3 / 4),
                                        (lambda: Annulus(), math.pi * (1 - 0.25) / 4)])
def test_the_drawn_region_is_the_geometrys_inside(make, area):
    """Every map is blank exactly where the geometry's own inside test says the grid point is outside (the
    mask is computed independently here from ``geometry.contains`` on the same grid), and the drawn share of
    the box is the domain's area share to grid resolution (2/n of the box per boundary crossing)."""
    pb = make()
    n = 81
    (name, fig), = solution_figures(pb, pb.init_params(0), n=n)
    lo, hi = pb.geometry.bbox
    a = torch.linspace(float(lo[0]), float(hi[0]), n, dtype=torch.float64)
    b = torch.linspace(float(lo[1]), float(hi[1]), n, dtype=torch.float64)
    A, B = torch.meshgrid(a, b, indexing="xy")
    inside = pb.geometry.contains(torch.stack([A.reshape(-1), B.reshape(-1)], 1)).numpy().reshape(n, n)
    masks = _drawn_masks(fig)
    assert len(masks) == 3   # exact, network, |error|
    for m in masks:
        assert np.array_equal(m, ~inside)
    assert abs(inside.mean() - area) < 8 / n
    assert [ax.get_xlabel() for ax in fig.axes if ax.images] == ["x"] * 3
    assert [ax.get_ylabel() for ax in fig.axes if ax.images] == ["y"] * 3


def test_space_time_axes_are_x_and_t_and_2d_space_gets_time_slices():
    heat = get_problem("heat")
    (_, fig), = solution_figures(heat, heat.init_params(0), n=21)
    maps = [ax for ax in fig.axes if ax.images]
    assert {(ax.get_xlabel(), ax.get_ylabel()) for ax in maps} == {("x", "t")}
    nd = get_problem("heat-nd")
    (_, fig), = solution_figures(nd, nd.init_params(0), n=11)
    titles = [ax.get_title() for ax in fig.axes if ax.images]
    assert len(titles) == 9 and sum("t = 0," in t for t in titles) == 3 and sum("t = 1," in t for t in titles) == 3
    assert {(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes if ax.images} == {("x", "y")}


def test_every_compared_run_and_every_output_is_drawn(tmp_path):
    kov = get_problem("kovasznay")
    runs = [fake_result(kov, "gn", theta=kov.init_params(0)), fake_result(kov, "fipa", theta=kov.init_params(1))]
    paths = plot_runs(kov, runs, str(tmp_path))
    names = [f"solution_{m}_{c}.png" for m in ("gn", "fipa") for c in "uvp"]
    assert_pngs(paths, names + ["error_vs_time.png", "error_vs_step.png", "error_vs_floats.png"])


def test_a_failing_plot_is_a_warning_not_a_lost_result(tmp_path, caplog):
    kov = get_problem("kovasznay")

    def broken(x):
        raise RuntimeError("exact solution unavailable")
    kov.exact = broken
    with caplog.at_level(logging.WARNING, logger="fedsciml.runtime.plotting"):
        paths = plot_runs(kov, [fake_result(kov, "gn", theta=kov.init_params(0))], str(tmp_path))
    assert_pngs(paths, ["error_vs_time.png", "error_vs_step.png", "error_vs_floats.png"])
    assert "plot solution (gn) not drawn: RuntimeError: exact solution unavailable" in caplog.text


def test_kovasznay_out_writes_the_model_and_a_plot_per_output(tmp_path, capsys):
    """Issue 30 item 4 / issue 31 item 3: a multi-output DomainPDE run with --out (was: a reshape error,
    exit 2, no model)."""
    from fedsciml.cli import main

    out = tmp_path / "kov"
    code = main(["solve", "kovasznay", "--method", "gn", "--clients", "2", "--rounds", "1", "--n-interior", "30",
                 "--n-boundary", "8", "--quiet", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    for f in ("result.json", "history.csv", "model.safetensors", "model.json", "solution_u.png", "solution_v.png",
              "solution_p.png"):
        assert (out / f).is_file(), f
    u = fs.load_model(str(out))
    assert tuple(u(torch.zeros(4, 2, dtype=torch.float64)).shape) == (4, 3)


def test_error_vs_floats_draws_only_runs_that_communicate(tmp_path):
    pb = get_problem("bratu")
    central = fake_result(pb, theta=None)
    for row in central.history:
        row["floats_sent"] = 0
    from fedsciml.runtime.plotting import plot_error_vs_floats

    assert plot_error_vs_floats([central], str(tmp_path)) == []
    assert_pngs(plot_error_vs_floats([central, fake_result(pb, "gn")], str(tmp_path)), ["error_vs_floats.png"])


def test_bench_images_round_axis_has_whole_ticks():
    from fedsciml.images.bench import figure

    res = {"setting": {"protocol": "multi-round", "seeds": [0], "alpha": None, "dataset": "mnist", "model": "lenet",
                       "clients": 2},
           "results": {"fedavg": {"history": [[(1, 0.5), (2, 0.6), (3, 0.7)]]}}}
    fig = figure(res)
    ticks = [t for t in fig.axes[0].get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_per_term_loss_history_adds_up_and_is_plotted(tmp_path):
    """Each residual part's share of ½‖r‖²/N (the PDE residual and each condition) in every history row; the
    terms add up to the row's loss (the same residuals summed in another order: relative 1e-12) and
    ``loss_terms.png`` draws them."""
    heat = get_problem("heat", n_interior=40, n_boundary=8)
    res = fs.solve(heat, "gn", clients=2, rounds=2)
    keys = [k for k in res.history[0] if k.startswith("loss[")]
    assert keys == ["loss[pde]", "loss[dirichlet:x-]", "loss[initial]", "loss[neumann:x+]"]
    for row in res.history:
        assert sum(row[k] for k in keys) == pytest.approx(row["loss"], rel=1e-12)
    paths = plot_runs(heat, [res], str(tmp_path))
    assert "loss_terms.png" in [os.path.basename(p) for p in paths]
    ridge = fs.solve("ridge-linear", "one-shot", clients=2)          # one residual part: no terms
    assert not [k for k in ridge.history[0] if k.startswith("loss[")]


def test_error_map_colour_scale_is_log_exactly_when_the_range_spans_more_than_three_decades():
    from matplotlib.colors import LogNorm

    from fedsciml.runtime.plotting import LOG_DECADES, error_norm

    assert LOG_DECADES == 3.0
    wide = np.array([1e-6, 1e-4, 2e-3, np.nan, 0.0])  # 3.3 decades among the finite positive values
    narrow = np.array([1e-3, 5e-2, 0.9, np.nan, 0.0])  # 2.95 decades
    nw, nn = error_norm(wide), error_norm(narrow)
    assert isinstance(nw, LogNorm) and (nw.vmin, nw.vmax) == (1e-6, 2e-3)
    assert not isinstance(nn, LogNorm) and (nn.vmin, nn.vmax) == (0.0, 0.9)
    # in a drawn figure: an untrained network on the L-shape has |error| over many decades -> log colours
    pb = get_problem("poisson-lshape")
    (_, fig), = solution_figures(pb, pb.init_params(0), n=41)
    err_im = [im for ax in fig.axes for im in ax.images if im.get_array().ndim == 2][2]
    err = err_im.get_array().compressed()
    pos = err[err > 0]
    assert isinstance(err_im.norm, LogNorm) == (math.log10(pos.max() / pos.min()) > 3)


def test_holes_are_drawn_at_four_times_the_raster_resolution():
    """Over each map lies an RGBA overlay on a 4n × 4n raster, opaque exactly where the geometry's own inside
    test says the fine point is outside (computed here independently)."""
    from fedsciml.runtime.plotting import FINE

    pb = Annulus()
    n = 41
    (_, fig), = solution_figures(pb, pb.init_params(0), n=n)
    overlays = [im.get_array() for ax in fig.axes for im in ax.images if im.get_array().ndim == 3]
    assert len(overlays) == 3
    m = FINE * n
    lo, hi = pb.geometry.bbox
    A, B = torch.meshgrid(torch.linspace(float(lo[0]), float(hi[0]), m, dtype=torch.float64),
                          torch.linspace(float(lo[1]), float(hi[1]), m, dtype=torch.float64), indexing="xy")
    inside = pb.geometry.contains(torch.stack([A.reshape(-1), B.reshape(-1)], 1)).numpy().reshape(m, m)
    for ov in overlays:
        assert ov.shape == (m, m, 4)
        assert np.array_equal(np.asarray(ov)[..., 3] == 1.0, ~inside)


def test_identical_runs_are_marked_not_hidden(tmp_path):
    """gn under --compare centralized has the same iterates: its line is drawn dashed and the legend says so."""
    from matplotlib.figure import Figure

    from fedsciml.runtime import plotting

    pb = get_problem("bratu")
    a, b = fake_result(pb, "centralized", optimizer="gn"), fake_result(pb, "gn")
    b.options = {}
    c = fake_result(pb, "fipa")
    c.history = [dict(h, rel_l2=h["rel_l2"] * 2) for h in c.history]
    seen = []
    orig = plotting.save_figure

    def keep(fig, path):
        seen.append((os.path.basename(path), fig))
        orig(fig, path)

    plotting.save_figure = keep
    try:
        plotting.plot_runs(pb, [a, b, c], str(tmp_path))
    finally:
        plotting.save_figure = orig
    figs = dict(seen)
    for name in ("error_vs_step.png", "error_vs_floats.png"):
        fig: Figure = figs[name]
        labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert labels == ["centralized/gn", "gn (= centralized/gn: identical iterates)", "fipa"]
        styles = [ln.get_linestyle() for ln in fig.axes[0].get_lines()]
        assert styles == ["-", "--", "-"]


def test_one_shot_ridge_draws_predictions_and_coefficients_not_loss_curves(tmp_path):
    """A one-shot ridge run (one round: two history rows) gets ridge_fit.png — predicted A θ against the test
    targets b, and θ by index (checked against A θ computed here) — and no per-round loss/error plots."""
    from fedsciml.runtime import plotting

    pb = get_problem("ridge-linear", n_samples=50)
    A, b = pb.test_data()
    theta = torch.linspace(-1, 1, A.shape[1], dtype=torch.float64)
    r = fake_result(pb, "one-shot", theta=theta, metric="mse")
    r.history = r.history[:2]
    seen = {}
    orig = plotting.save_figure
    plotting.save_figure = lambda fig, path: (seen.__setitem__(os.path.basename(path), fig), orig(fig, path))
    try:
        paths = plot_runs(pb, [r], str(tmp_path))
    finally:
        plotting.save_figure = orig
    assert_pngs(paths, ["ridge_fit.png"])
    left, right = seen["ridge_fit.png"].axes
    (pts, diag), (coef,) = left.get_lines(), right.get_lines()
    assert diag.get_label() == "y = x"
    assert np.array_equal(pts.get_xdata(), b.numpy())
    assert np.array_equal(pts.get_ydata(), (A @ theta).numpy())  # the same product: bitwise
    assert np.array_equal(coef.get_ydata(), theta.numpy())
    assert left.get_xlabel() == "actual (test set)" and left.get_ylabel() == "predicted"
