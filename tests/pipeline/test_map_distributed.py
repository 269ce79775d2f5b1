"""A MAP fit with a mean function on a local two-worker cluster takes the same bits as in this process, for the
model families whose priors and means joined last (issue 65): the prior and the mean sit in the global term and
the rows' terms, computed where the step is, so the engine's block sums in the blocks' order give the same
iterates wherever they run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import pep_gp
from pep_gp.kernels import SquaredExponential
from pep_gp.priors import Gamma
from tests.trainstores import leaves_equal
from tests.tiny import INDUCING, data

KERNEL = SquaredExponential(prior={"lengthscales": Gamma(4.0, 4.0)})
MODELS = {  # estimator: its task among tests.tiny's data sets
    "MultiClassGPClassifier": "multiclass",
    "TiedEPClassifier": "binary",
    "HeteroscedasticGPRegressor": "regression",
    "DeepGPRegressor": "regression",
}


def fitted(name: str, **options):
    x, y = data()[MODELS[name]]
    settings = {"num_inducing": INDUCING, "solver": "adam", "batch_size": 20, "max_iter": 4, "kernel": KERNEL,
                "mean_function": "linear", **options}
    estimator = getattr(pep_gp, name)(**settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # four steps, on purpose
        return estimator.fit(x, y)


@pytest.mark.heavy
@pytest.mark.parametrize("name", [pytest.param("MultiClassGPClassifier"),
                                  *[pytest.param(name, marks=pytest.mark.exhaustive) for name in list(MODELS)[1:]]])
def test_a_map_fit_with_a_mean_is_bit_identical_on_two_workers(name, cluster):
    here, there = fitted(name), fitted(name, cluster=cluster.client)
    assert here.solver_ == there.solver_ == "adam" and here.n_iter_ == there.n_iter_ == 4
    assert leaves_equal(here.params_, there.params_)
    np.testing.assert_array_equal(here.energy_trace_, there.energy_trace_)
    assert not np.array_equal(here.energy_trace_, fitted(name, mean_function=None).energy_trace_)  # the mean counts
