"""Kernels as users give them: ``kernel=`` on the estimators (an object, a table, a spelling), fixed values that a
fit leaves bit-identical, scikit-learn's ``clone``/``set_params``, the fitted ``kernel_``, a saved run that
rebuilds its kernel, a deep GP's kernel that does not fit a layer, and ``[model.kernel]``/``--set`` through the settings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from pep_gp import DeepGPRegressor, SparseGPClassifier, SparseGPRegressor, load
from pep_gp.kernels import Linear, Matern52, SquaredExponential
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.runs.config import load_config, parse_settings


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(38)
    x = rng.normal(size=(30, 2))
    return x, np.sin(2 * x[:, 0]) + 0.3 * x[:, 1] + 0.1 * rng.normal(size=30)


def _fit(estimator, x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return estimator.fit(x, y)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_fixed_hyper_parameter_is_bit_identical_after_100_steps_and_the_others_move(data):
    x, y = data
    kernel = Matern52(lengthscales=0.7, variance=2.0, fixed=("lengthscales",)) + Linear(0.5)
    model = _fit(SparseGPRegressor(kernel=kernel, num_inducing=5, max_iter=100, tol=0), x, y)
    fitted = model.kernel_
    assert model.n_iter_ == 100
    assert fitted.left.lengthscales.value[0, 0] == 0.7  # stored as log 0.7 and read back: exactly the start
    np.testing.assert_array_equal(fitted.left.lengthscales.raw, kernel.bank(1, 2).left.lengthscales.raw)
    assert abs(float(fitted.left.variance.value[0]) - 2.0) > 1e-3 and abs(float(fitted.right.variance.value[0]) - 0.5) > 1e-3
    assert repr(fitted).startswith("Matern52(lengthscales=0.7 (fixed), variance=")
    assert model.get_params()["kernel"] is kernel  # the constructor argument is kept as given


def test_kernels_clone_set_params_and_spellings_are_one_setting(data):
    x, y = data
    model = SparseGPClassifier(kernel="matern52+linear", num_inducing=4)
    copy = clone(model.set_params(kernel=Matern52(0.5) * SquaredExponential(active_dims=[1])))
    assert repr(copy.kernel) == "Matern52(lengthscales=0.5, variance=1) * SquaredExponential(variance=1, active_dims=[1])"
    settings = SparseGPClassifier(kernel="matern52+linear")._settings()
    assert settings["kernel"] == (Matern52() + Linear()).to_dict()
    with pytest.raises(ValueError, match=r"kernel: .*unknown kernel 'matern25'.*did you mean 'matern52'"):
        _fit(SparseGPRegressor(kernel="matern25"), x, y)
    with pytest.raises(ValueError, match=r"kernel of layer 2 \(3 inputs: the previous layer's\): matern52: "
                                         r"lengthscales needs 1 or 3 values"):
        _fit(DeepGPRegressor(kernel=Matern52(lengthscales=[0.5, 1.0]), hidden_dims=(3,), num_inducing=4), x, y)


@pytest.mark.heavy  # a whole training run, saved and loaded
def test_a_saved_run_rebuilds_its_kernel_and_predicts_bit_identically(data, tmp_path):
    x, y = data
    model = _fit(SparseGPRegressor(kernel=Matern52(variance=1.5) + Linear(), num_inducing=5, max_iter=5), x, y)
    model.save(tmp_path / "run")
    loaded = load(tmp_path / "run")
    assert repr(loaded.kernel_) == repr(model.kernel_)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


def test_the_kernel_table_and_set_are_validated_by_the_model_settings():
    config = load_config(None, settings=parse_settings(["model.kernel=matern32*periodic"]))
    for name in ("multiclass-sep", "deep-gp", "deep-gp-classifier", "deep-gp-multiclass"):
        settings = model_settings(get_model(name), config.model)
        assert [term["name"] for term in settings.kernel["terms"]] == ["matern32", "periodic"]
    spec = get_model("multiclass-sep")
    table = {"kernel": {"name": "matern52", "lengthscales": 0.5, "fixed": ["lengthscales"]}}
    assert model_settings(spec, table).kernel == Matern52(0.5, fixed="lengthscales").to_dict()
    with pytest.raises(InputError, match=r"model.kernel: Value error, unknown kernel 'peroidic'.*did you mean 'periodic'"):
        model_settings(spec, {"kernel": {"name": "peroidic"}})


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_max_iter_0_gives_the_objective_at_the_given_kernel_and_noise(data):
    """``CollapsedGPRegressor(kernel=…, noise_variance=…, max_iter=0)`` with M = N (the inducing inputs are the
    training inputs) returns the exact evidence at exactly those values: scikit-learn's
    ``GaussianProcessRegressor`` with the same Matérn 5/2 + linear kernel and noise, on the standardised rows,
    in the user's units of y. The sparse regressor starts from the same noise."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process import kernels as sk

    from pep_gp import CollapsedGPRegressor
    from pep_gp.core.parameters import constrained

    x, y = data
    kernel = Matern52(lengthscales=[0.8, 1.3], variance=1.7) + Linear(0.2)
    model = CollapsedGPRegressor(kernel=kernel, noise_variance=0.05, num_inducing=len(y), jitter=0.0,
                                 max_iter=0).fit(x, y)
    xs, ys = (x - model.x_mean_) / model.x_std_, model.targets_(y)
    reference = (sk.ConstantKernel(1.7) * sk.Matern([0.8, 1.3], nu=2.5) + sk.ConstantKernel(0.2) * sk.DotProduct(0.0)
                 + sk.WhiteKernel(0.05))
    gp = GaussianProcessRegressor(reference, optimizer=None).fit(xs, ys)
    exact = gp.log_marginal_likelihood(gp.kernel_.theta) - len(y) * np.log(model.targets_.scale)
    assert model.log_marginal_likelihood() == pytest.approx(exact, rel=1e-8)
    sparse = SparseGPRegressor(noise_variance=0.05, num_inducing=4, max_iter=0).fit(x, y)
    assert float(constrained(model.params_)["noise_variance"]) == pytest.approx(0.05, rel=1e-14)
    assert float(sparse.model_.likelihood.noise_variance(sparse.params_.likelihood)) == pytest.approx(0.05, rel=1e-14)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_untied_multi_class_classifier_starts_from_the_given_kernel():
    from pep_gp import MultiClassEPClassifier

    rng = np.random.default_rng(2)
    x = rng.normal(size=(24, 2))
    labels = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int)
    kernel = Matern52(lengthscales=0.9, variance=1.2, fixed=("lengthscales", "variance"))
    model = _fit(MultiClassEPClassifier(kernel=kernel, num_inducing=3, max_iter=3), x, labels)
    assert repr(model.kernel_) == "Matern52(lengthscales=0.9 (fixed), variance=1.2 (fixed))"


def _matern52(a, b, lengthscales, variance):
    from sklearn.gaussian_process import kernels as sk

    return variance * sk.Matern(lengthscales, nu=2.5)(a, b)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_given_inducing_points_give_the_pep_alpha_objective_at_exactly_those_values(data):
    """``inducing_points=Z`` (the inputs' units), ``train_inducing=False``, a fixed Matérn 5/2 and the starting noise:
    at ``max_iter=0`` the sparse regressor's objective by Adam's steps is the Power-EP energy (each row's cavity
    without its own exact site) at its starting factor (``Λ = K_uu⁻¹``, ``η = 0``), and the collapsed regressor's,
    and the sparse one's full-batch fit's (whose last sweep puts its exact sites at their fixed point), the PEP-α
    objective (Bui, Yan & Turner 2017, eqs. 110 and 128), all computed here with scikit-learn's Matérn on
    ``(Z − mean)/std``; ``Z`` is the model's inducing inputs bit for bit and stays so through 100 steps while the
    rest moves."""
    from pep_gp import CollapsedGPRegressor
    from tests import oracles

    x, y = data
    x = 3.0 * x + 10.0  # the user's units are not the standardised ones
    z = np.array([[7.0, 8.5], [10.0, 10.0], [12.5, 9.0], [9.0, 13.0]])
    ls, var, s2, alpha = np.array([0.8, 1.3]), 1.7, 0.05, 0.5
    settings = dict(kernel=Matern52(ls, var, fixed=("lengthscales", "variance")), inducing_points=z,
                    train_inducing=False, noise_variance=s2, alpha=alpha, jitter=0.0)
    start = SparseGPRegressor(**settings, max_iter=0, solver="adam").fit(x, y)
    zs, xs, ys = (z - start.x_mean_) / start.x_std_, (x - start.x_mean_) / start.x_std_, start.targets_(y)
    np.testing.assert_array_equal(start.params_.inducing, zs)
    kuu, kuf, kff = _matern52(zs, zs, ls, var), _matern52(zs, xs, ls, var), np.full(len(y), var)
    jacobian = len(y) * np.log(start.targets_.scale)
    energy = oracles.own_site_power_ep_energy(kuu, kuf, kff, ys, s2, np.zeros(len(z)), np.linalg.inv(kuu), alpha)
    assert start.log_marginal_likelihood() == pytest.approx(energy - jacobian, rel=1e-9)
    collapsed = CollapsedGPRegressor(**settings, max_iter=0).fit(x, y)
    full_batch = SparseGPRegressor(**settings, max_iter=0).fit(x, y)
    pep_alpha = oracles.pep_alpha_evidence(kuu, kuf, kff, ys, s2, alpha) - jacobian
    assert full_batch.solver_ == "lbfgs"
    assert collapsed.log_marginal_likelihood() == pytest.approx(pep_alpha, rel=1e-9)
    assert full_batch.log_marginal_likelihood() == pytest.approx(pep_alpha, rel=1e-9)

    fitted = _fit(SparseGPRegressor(**settings, max_iter=100, tol=0), x, y)
    assert fitted.n_iter_ == 100 and fitted.get_params()["inducing_points"] is z
    np.testing.assert_array_equal(fitted.params_.inducing, start.params_.inducing)
    assert float(fitted.model_.likelihood.noise_variance(fitted.params_.likelihood)) != pytest.approx(s2, rel=1e-3)


@pytest.mark.parametrize("z, message", [
    (np.zeros((3, 1)), "inducing_points has 1 columns; the inputs have 2"),
    (np.array([[0.0, 1.0], [np.nan, 0.0]]), r"inducing_points: .*NaN or Inf at row 1, column 0"),
    (np.zeros((31, 2)), "inducing_points has 31 rows, more than the 30 training rows"),
    (np.zeros(2), r"inducing_points: .*must be a 2-D array .*got shape \(2,\)"),
], ids=["width", "nan", "rows", "1-d"])
def test_bad_inducing_points_are_refused_in_one_line_naming_them(data, z, message):
    x, y = data
    with pytest.raises(ValueError, match=message) as error:
        SparseGPRegressor(inducing_points=z, max_iter=0).fit(x, y)
    assert "\n" not in str(error.value)


def test_inducing_points_in_the_model_table_set_num_inducing():
    spec = get_model("sparse-gp-classifier")
    config = load_config(None, settings=parse_settings(["model.inducing_points=[[0.0, 1.0], [2.0, 3.0]]"]))
    settings = model_settings(spec, config.model)
    assert settings.num_inducing == 2 and settings.in_model_units([1.0, 1.0], [2.0, 4.0]).inducing_points == [
        [-0.5, 0.0], [0.5, 0.5]]
    with pytest.raises(InputError, match=r"model.inducing_points: .*2 rows, but num_inducing = 5"):
        model_settings(spec, {"inducing_points": [[0.0, 1.0], [2.0, 3.0]], "num_inducing": 5})


@pytest.mark.exhaustive
@pytest.mark.slow  # a compile of its own: 17 s at load 7 on 2 cores (the estimator test covers the same trainer path)
def test_a_store_run_places_the_configs_inducing_points_with_the_stores_statistics(regression_store, tmp_path):
    """``pep train``'s path: ``[model] inducing_points`` in the store's units become ``(Z − x_mean)/x_std`` of the
    store's training split, kept by ``train_inducing = false``; the manifest keeps them as given."""
    from pep_gp.pipeline.training.trainer import TrainJob, train
    from tests.trainstores import FAST

    z = [[0.1, -0.2, 0.3], [1.0, 0.5, -1.0], [-0.7, 0.0, 0.4]]
    config = FAST.model_copy(update={"model": {"inducing_points": z, "train_inducing": False}, "epochs": 1})
    result = train(TrainJob("sparse-gp-regressor", regression_store, config, tmp_path / "run"))
    mean, std = (np.asarray(regression_store.attrs[k]) for k in ("x_mean", "x_std"))
    np.testing.assert_array_equal(result.params.inducing, (np.asarray(z) - mean) / std)
    assert load(tmp_path / "run").get_params()["inducing_points"] == z


def test_inducing_points_beyond_the_rows_are_refused_before_the_settings_hold_them(data, monkeypatch):
    """Issue 62, item 6: ten million inducing points for a 120-row fit were refused only after 851 s, once the
    settings had turned them into lists. The count is checked first: the settings are never built."""
    x, y = data

    def settings_built(self):
        raise AssertionError("the settings were built before the inducing points' count was checked")

    monkeypatch.setattr(SparseGPRegressor, "_settings", settings_built)
    with pytest.raises(ValueError, match=r"inducing_points has 1,000,000 rows, more than the 30 training rows"):
        SparseGPRegressor(inducing_points=np.zeros((1_000_000, 2))).fit(x, y)
