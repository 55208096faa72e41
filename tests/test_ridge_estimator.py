"""FederatedRidge / FederatedRidgeCV against scikit-learn on the diabetes table split across 3 sites.

References are independent: scikit-learn's own ``Ridge`` (and ``StandardScaler``) on the pooled rows, and
for the CV a loop of scikit-learn ``Ridge`` fits, one per left-out site.  Float comparisons use relative
tolerances (different operation orders, so no bitwise equality is claimed).
"""
import io
import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

from fedsciml.ridge import FederatedRidge, FederatedRidgeCV, site_statistics
from fedsciml.ridge.estimator import check_message, combine

TOL = 1e-10


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    sites = np.arange(len(y)) % 3                     # 3 sites, interleaved rows
    sw = np.random.default_rng(0).uniform(0.2, 3.0, len(y))
    return X, y, sites, sw


def _rel(a, b):
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_equals_pooled_sklearn_ridge(diabetes, fit_intercept, weighted):
    X, y, sites, sw = diabetes
    w = sw if weighted else None
    ref = Ridge(alpha=0.1, fit_intercept=fit_intercept, solver="cholesky").fit(X, y, sample_weight=w)
    est = FederatedRidge(alpha=0.1, fit_intercept=fit_intercept).fit(X, y, sample_weight=w, sites=sites)
    assert est.n_sites_ == 3 and est.n_features_in_ == X.shape[1]
    assert _rel(est.coef_, ref.coef_) < TOL
    assert abs(est.intercept_ - ref.intercept_) <= TOL * max(1.0, abs(ref.intercept_))
    assert _rel(est.predict(X), ref.predict(X)) < TOL
    assert isinstance(est.predict(X), np.ndarray) and est.predict(X).dtype == np.float64
    # score is R² (RegressorMixin), as scikit-learn's
    assert abs(est.score(X, y) - ref.score(X, y)) < TOL


def test_sites_split_does_not_change_the_model_and_fit_clients_agrees(diabetes):
    X, y, sites, sw = diabetes
    one = FederatedRidge(alpha=0.3).fit(X, y, sample_weight=sw)                  # one site
    three = FederatedRidge(alpha=0.3).fit(X, y, sample_weight=sw, sites=sites)
    clients = FederatedRidge(alpha=0.3).fit_clients([(X[sites == k], y[sites == k], sw[sites == k]) for k in range(3)])
    msgs = [site_statistics(X[sites == k], y[sites == k], sw[sites == k]) for k in range(3)]
    server = FederatedRidge(alpha=0.3).fit_messages(msgs)
    for m in (three, clients, server):
        assert _rel(m.coef_, one.coef_) < TOL and abs(m.intercept_ - one.intercept_) < TOL * abs(one.intercept_)
    # the message is the statistics' size: count, d+1 means, packed (d+1)×(d+1) scatter
    d = X.shape[1]
    assert sum(v.size for v in msgs[0].values()) == 1 + (d + 1) + (d + 1) * (d + 2) // 2


def test_large_offset_features_keep_their_digits():
    # features with mean 1e6 and spread 1: an uncentered Gram minus Nμμᵀ would lose ~12 digits here
    rng = np.random.default_rng(1)
    X = 1e6 + rng.standard_normal((300, 4))
    y = X @ np.array([1.0, -2.0, 0.5, 3.0]) + rng.standard_normal(300)
    sites = rng.integers(0, 3, 300)
    ref = Ridge(alpha=1.0).fit(X - X.mean(0), y)                   # pooled, centered by scikit-learn
    est = FederatedRidge(alpha=1.0).fit(X, y, sites=sites)
    assert _rel(est.coef_, ref.coef_) < 1e-8


def test_standardize_equals_pipeline_with_standard_scaler(diabetes):
    X, y, sites, sw = diabetes
    X = X * np.array([1.0, 10, 100, 0.1, 1, 1, 5, 1, 1, 0.01])     # features of very different scales
    X[:, 3] += 50.0
    ref = make_pipeline(StandardScaler(), Ridge(alpha=2.0)).fit(X, y)
    est = FederatedRidge(alpha=2.0, standardize=True).fit(X, y, sites=sites)
    assert _rel(est.predict(X), ref.predict(X)) < TOL
    assert _rel(est.scale_, ref[0].scale_) < TOL
    assert _rel(est.coef_, ref[1].coef_ / ref[0].scale_) < TOL
    # with weights: the scaler's weighted statistics, federated
    sc = StandardScaler().fit(X, sample_weight=sw)
    r2 = Ridge(alpha=2.0).fit(sc.transform(X), y, sample_weight=sw)
    est2 = FederatedRidge(alpha=2.0, standardize=True).fit(X, y, sample_weight=sw, sites=sites)
    assert _rel(est2.predict(X), r2.predict(sc.transform(X))) < TOL
    # without an intercept: scaled, not centered
    ref_n = make_pipeline(StandardScaler(with_mean=False), Ridge(alpha=2.0, fit_intercept=False)).fit(X, y)
    est_n = FederatedRidge(alpha=2.0, standardize=True, fit_intercept=False).fit(X, y, sites=sites)
    assert _rel(est_n.predict(X), ref_n.predict(X)) < TOL and est_n.intercept_ == 0.0
    # a constant feature keeps scale 1 (StandardScaler's rule)
    Xc = X.copy()
    Xc[:, 0] = 7.0
    ref_c = make_pipeline(StandardScaler(), Ridge(alpha=2.0)).fit(Xc, y)
    est_c = FederatedRidge(alpha=2.0, standardize=True).fit(Xc, y, sites=sites)
    assert est_c.scale_[0] == 1.0 and _rel(est_c.predict(Xc), ref_c.predict(Xc)) < TOL


def test_check_estimator_passes():
    # every applicable check passes; none is marked as an expected failure
    for est in (FederatedRidge(), FederatedRidge(standardize=True, fit_intercept=False), FederatedRidgeCV(),
                FederatedRidgeCV(standardize=True, fit_intercept=False)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SkipTestWarning for the checks that need pandas (not installed)
            results = check_estimator(est, on_fail=None)
        failed = [r["check_name"] for r in results if r["status"] == "failed"]
        assert not failed and len(results) > 40


def test_pipeline_cross_val_score_gridsearch_pickle(diabetes):
    X, y, sites, _ = diabetes
    pipe = Pipeline([("ridge", FederatedRidge(alpha=0.5, standardize=True))])
    scores = cross_val_score(pipe, X, y, cv=GroupKFold(3), groups=sites, params={"ridge__sites": sites})
    ref = cross_val_score(make_pipeline(StandardScaler(), Ridge(alpha=0.5)), X, y, cv=GroupKFold(3), groups=sites)
    assert _rel(scores, ref) < 1e-9
    gs = GridSearchCV(FederatedRidge(), {"alpha": [0.01, 0.1, 1.0]}, cv=3).fit(X, y, sites=sites)
    gs_ref = GridSearchCV(Ridge(), {"alpha": [0.01, 0.1, 1.0]}, cv=3).fit(X, y)
    assert gs.best_params_ == gs_ref.best_params_
    assert _rel(gs.cv_results_["mean_test_score"], gs_ref.cv_results_["mean_test_score"]) < 1e-9
    est = FederatedRidgeCV(alphas=[0.01, 0.1, 1.0]).fit(X, y, sites=sites)
    for m in (gs.best_estimator_, est):
        back = _RestrictedUnpickler(io.BytesIO(pickle.dumps(m))).load()
        assert np.array_equal(back.predict(X), m.predict(X))   # bitwise: the same arrays, the same operations


class _RestrictedUnpickler(pickle.Unpickler):
    """A fitted estimator is pickled by its users (scikit-learn's convention); reading it back here resolves only
    numpy's, scikit-learn's and fedsciml's own names, so a load can run no other code."""

    def find_class(self, module, name):
        if module.split(".")[0] in ("numpy", "sklearn", "fedsciml"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed here")


def _loco_reference(X, y, sites, sw, alphas, fit_intercept, standardize):
    """Leave-one-site-out CV by refitting scikit-learn on the other sites' rows and scoring the held-out site."""
    loss = np.zeros((len(np.unique(sites)), len(alphas)))
    for k in np.unique(sites):
        tr, te = sites != k, sites == k
        for j, a in enumerate(alphas):
            Xtr, Xte = X[tr], X[te]
            if standardize:
                sc = StandardScaler().fit(X[tr], sample_weight=sw[tr])
                Xtr, Xte = sc.transform(Xtr), sc.transform(Xte)
            pred = Ridge(alpha=a, fit_intercept=fit_intercept).fit(Xtr, y[tr], sample_weight=sw[tr]).predict(Xte)
            loss[k, j] = np.sum(sw[te] * (y[te] - pred) ** 2)
    return loss


@pytest.mark.parametrize("fit_intercept,standardize", [(True, False), (True, True), (False, False)])
def test_cv_scored_by_server_equals_refit_loop(diabetes, fit_intercept, standardize):
    X, y, sites, sw = diabetes
    alphas = np.logspace(-4, 2, 7)
    est = FederatedRidgeCV(alphas=alphas, fit_intercept=fit_intercept, standardize=standardize)
    est.fit(X, y, sample_weight=sw, sites=sites)
    ref = _loco_reference(X, y, sites, sw, alphas, fit_intercept, standardize)
    assert _rel(est.cv_site_loss_, ref) < 1e-9
    assert est.alpha_ == alphas[int(np.argmin(ref.sum(0)))]
    full = FederatedRidge(alpha=est.alpha_, fit_intercept=fit_intercept, standardize=standardize)
    assert np.array_equal(full.fit(X, y, sample_weight=sw, sites=sites).coef_, est.coef_)


def test_nan_rows_raise_like_sklearn(diabetes):
    X, y, sites, _ = diabetes
    Xn = X.copy()
    Xn[105, 2] = np.nan                                            # a row of site 1 in both splits
    with pytest.raises(ValueError, match="Input X contains NaN"):
        FederatedRidge().fit(Xn, y, sites=sites)
    with pytest.raises(ValueError, match="Input X contains NaN"):
        FederatedRidge().fit_clients([(X[:100], y[:100]), (Xn[100:200], y[100:200]), (X[200:], y[200:])])
    yn = y.copy()
    yn[7] = np.inf
    with pytest.raises(ValueError, match="Input y contains infinity"):
        FederatedRidgeCV().fit(X, yn, sites=sites)


def test_bad_inputs_are_named(diabetes):
    X, y, sites, _ = diabetes
    with pytest.raises(ValueError, match="at least 2 sites"):
        FederatedRidgeCV().fit(X, y, sites=np.zeros(len(y)))   # one site label: nothing to leave out
    with pytest.raises(ValueError, match="one label per row"):
        FederatedRidge().fit(X, y, sites=sites[:-1])
    with pytest.raises(ValueError, match="alphas must be"):
        FederatedRidgeCV(alphas=[0.0, 1.0]).fit(X, y, sites=sites)
    msg = site_statistics(X[:50], y[:50])
    bad = dict(msg, S=msg["S"].copy())
    bad["S"][0] = -1.0
    with pytest.raises(ValueError, match="site 'b'.*negative diagonal"):
        FederatedRidge().fit_messages([msg, bad], sites=["a", "b"])
    with pytest.raises(ValueError, match="site 1: field 'mean' contains non-finite"):
        FederatedRidge().fit_messages([msg, dict(msg, mean=np.full_like(msg["mean"], np.nan))])
    with pytest.raises(ValueError, match="shape"):
        check_message(dict(msg, mean=msg["mean"][:-1]), 0, X.shape[1])


def test_partial_fit_streams_rows_exactly(diabetes):
    X, y, sites, sw = diabetes
    est = FederatedRidge(alpha=0.2)
    for lo in range(0, len(y), 97):                                  # rows arrive in chunks at their sites
        s = slice(lo, lo + 97)
        for k in range(3):
            m = sites[s] == k
            if m.any():
                est.partial_fit(X[s][m], y[s][m], sample_weight=sw[s][m], site=k)
    ref = Ridge(alpha=0.2).fit(X, y, sample_weight=sw)
    assert est.n_sites_ == 3 and _rel(est.coef_, ref.coef_) < TOL
    N, mu, S = combine(est.site_messages_)
    assert abs(N - sw.sum()) < 1e-9 * sw.sum()


def test_the_runtime_does_not_import_scikit_learn_until_the_estimator_is_used():
    """scikit-learn costs ~1 s to import; the CLI and every stock-Flower ClientApp process (one per message) import
    the ridge runtime but not the estimator, so `fedsciml.ridge` loads the estimator on first use."""
    import subprocess
    import sys

    code = ("import sys, fedsciml.engines.flower.apps, fedsciml.cli.main; assert 'sklearn' not in sys.modules; "
            "import fedsciml.ridge as r; r.FederatedRidge; assert 'sklearn' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ one-table CV: scikit-learn's cv=
def test_cv_without_sites_is_kfold5_scored_as_ridgecv(diabetes):
    """No site labels: KFold(5) (scikit-learn's default splitter, 89/89/88/88/88 rows on diabetes — not np.linspace
    cuts), scored by the mean over the folds of 1 − R², so the alpha is RidgeCV(cv=5)'s.  Reference: scikit-learn's
    GridSearchCV mean test R² (different operations: rel 1e-8)."""
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import GridSearchCV

    X, y, *_ = diabetes
    alphas = np.logspace(-5, 1, 13)
    est = FederatedRidgeCV(alphas=alphas).fit(X, y)
    assert est.cv_mode_ == "folds" and est.cv_folds_ == 5
    assert est.alpha_ == RidgeCV(alphas=alphas, cv=5).fit(X, y).alpha_ == pytest.approx(10 ** -3.5)
    gs = GridSearchCV(Ridge(), {"alpha": alphas}, cv=5).fit(X, y)
    assert _rel(1.0 - est.cv_loss_, gs.cv_results_["mean_test_score"]) < 1e-8
    assert _rel(est.coef_, Ridge(alpha=est.alpha_).fit(X, y).coef_) < TOL
    with_sites = FederatedRidgeCV(alphas=alphas).fit(X, y, sites=np.arange(len(y)) % 3)
    assert with_sites.cv_mode_ == "sites" and with_sites.cv_folds_ == 3


@pytest.mark.parametrize("cv", [3, 10, "kfold-shuffled", "shufflesplit", "iterable"])
def test_cv_accepts_what_scikit_learn_accepts(diabetes, cv):
    """cv= as scikit-learn takes it (int, splitter, iterable of (train, test)): the same alpha as RidgeCV(cv=...)
    and the same mean R² per alpha as GridSearchCV (rel 1e-8: different operations)."""
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import GridSearchCV, KFold, ShuffleSplit

    X, y, *_ = diabetes
    alphas = np.logspace(-5, 1, 13)
    splitter = {"kfold-shuffled": KFold(4, shuffle=True, random_state=1),
                "shufflesplit": ShuffleSplit(6, random_state=0),
                "iterable": list(KFold(3).split(X))}.get(cv, cv)
    est = FederatedRidgeCV(alphas=alphas, cv=splitter).fit(X, y)
    assert est.alpha_ == RidgeCV(alphas=alphas, cv=splitter).fit(X, y).alpha_
    gs = GridSearchCV(Ridge(), {"alpha": alphas}, cv=splitter).fit(X, y)
    assert _rel(1.0 - est.cv_loss_, gs.cv_results_["mean_test_score"]) < 1e-8
    assert est.cv_mode_ == "folds"


def test_cv_with_group_splitter_and_refusals(diabetes):
    """A group splitter gets the site labels as groups; the messages-only paths refuse cv= in one line."""
    from sklearn.model_selection import GroupKFold

    X, y, sites, _ = diabetes
    est = FederatedRidgeCV(alphas=[0.01, 1.0], cv=GroupKFold(3)).fit(X, y, sites=sites)
    assert est.cv_mode_ == "folds" and est.cv_folds_ == 3 and est.n_sites_ == len(np.unique(sites))
    with pytest.raises(ValueError, match="cv=3 splits rows"):
        FederatedRidgeCV(cv=3).fit_clients([(X[:200], y[:200]), (X[200:], y[200:])])
    with pytest.raises(ValueError, match="at least 2"):
        FederatedRidgeCV(cv=[(np.arange(10), np.arange(10, 20))]).fit(X, y)


def test_multi_output_y_is_one_model_per_column(diabetes):
    X, y, sites, _ = diabetes
    Y = np.c_[y, 0.5 * y + X[:, 0], -y]
    est = FederatedRidge(alpha=0.3).fit(X, Y, sites=sites)
    ref = Ridge(alpha=0.3).fit(X, Y)
    assert est.coef_.shape == (3, X.shape[1]) and est.intercept_.shape == (3,)
    assert _rel(est.coef_, ref.coef_) < TOL and _rel(est.intercept_, ref.intercept_) < TOL
    assert _rel(est.predict(X[:7]), ref.predict(X[:7])) < TOL
    cv = FederatedRidgeCV(alphas=[0.01, 0.1, 1.0]).fit(X, Y, sites=sites)
    singles = [FederatedRidgeCV(alphas=[0.01, 0.1, 1.0]).fit(X, Y[:, j], sites=sites) for j in range(3)]
    total = sum(s.cv_loss_ for s in singles)   # one alpha for all targets, as RidgeCV by default
    assert cv.alpha_ == [0.01, 0.1, 1.0][int(np.argmin(total))] and _rel(cv.cv_loss_, total) < TOL
    assert _rel(cv.coef_[1], FederatedRidge(alpha=cv.alpha_).fit(X, Y[:, 1], sites=sites).coef_) < TOL


def test_groups_is_an_alias_of_sites(diabetes):
    X, y, sites, _ = diabetes
    a = FederatedRidgeCV(alphas=[0.01, 0.1, 1.0]).fit(X, y, groups=sites)
    b = FederatedRidgeCV(alphas=[0.01, 0.1, 1.0]).fit(X, y, sites=sites)
    assert a.alpha_ == b.alpha_ and np.array_equal(a.coef_, b.coef_) and a.sites_ == b.sites_
    with pytest.raises(ValueError, match="not both"):
        FederatedRidge().fit(X, y, sites=sites, groups=sites)
