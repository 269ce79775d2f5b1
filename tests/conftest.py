"""Shared test fixtures: every test runs JAX in float64 (scoped, see ``pep_gp.core.float64``), and every
process of one test run (pytest-xdist's workers, the ``pep`` commands and Dask workers the tests start) shares
one persistent compilation cache in a temporary directory, so a program compiled by one is loaded by the
others (the same executable: bit-identical results, tests/pipeline/test_compilation.py). A run given
``$PEP_COMPILATION_CACHE`` (``.ci/run`` shares one across its stages) uses that instead."""

import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import numpy as np
import pytest
from filelock import FileLock

import pep_gp.core
from pep_gp.pipeline.engine.compilation import (COMPILATION_CACHE_ENV, release_compiled_programs_if_crowded,
                                                use_compilation_cache)
from tests import tiny
from tests.messy_runs import MessyRun, messy_run


def pytest_configure(config):
    """The run's compilation cache: made by the first process (the controller with pytest-xdist, whose
    workers inherit the variable) and removed by it at the end."""
    if not os.environ.get(COMPILATION_CACHE_ENV):
        os.environ[COMPILATION_CACHE_ENV] = config._pep_compilation_cache = tempfile.mkdtemp(prefix="pep-test-jax-")
    use_compilation_cache()

# Heavy tests of more than 10 s each (measured under .ci/run's heavy selection on 2 cores at a load of ~25, the
# seconds beside each) that .ci/run leaves to releases, as if marked ``exhaustive``: further variants of a path
# another heavy test takes (a likelihood, a kernel, an α) and single options end to end. .ci/run's 25 minutes on
# 2 cores hold the rest; a test here runs with ``-m exhaustive``.
LEFT_TO_RELEASES = frozenset([
    "tests/pipeline/test_tiny_estimators.py::test_every_public_estimator_fits_predicts_and_round_trips_at_the_tiny_shapes[MultiClassDeepGPClassifier]",  # 20 s in .ci/run (DeepGPRegressor's round trip stays)
    "tests/pipeline/test_tiny_estimators.py::test_every_public_estimator_fits_predicts_and_round_trips_at_the_tiny_shapes[DeepGPClassifier]",  # 18 s in .ci/run (DeepGPRegressor's round trip stays)
    "tests/pipeline/test_multiclass_class_noise.py::test_a_fixed_class_noise_keeps_its_bits_while_the_kernel_moves[DirectMultiClassGPClassifier]",  # 14.6 s in .ci/run (MultiClassGPClassifier's stays)
    "tests/core/test_quadrature_likelihoods.py::test_predictive_quantiles_solve_the_predictive_cdf_row_by_row[poisson-()]",  # 10 s at load 18 (the negative binomial's and Student-t's stay)
    "tests/pipeline/test_multi_output_estimator.py::test_the_fitted_mean_is_each_outputs_training_mean_where_the_predictions_revert_to_it",  # ~15 s at load 5 (a pep train run's loaded estimator checks its far means: test_multi_target_stores.py)
    "tests/pipeline/test_multi_output_estimator.py::test_one_dimensional_targets_are_one_output",  # 7-14 s at load 20 (test_tiny_estimators.py fits, saves and loads one output)
    "tests/pipeline/test_ep_priors_means.py::test_the_exact_gp_classifiers_mean_and_prior",  # 17.3 s idle (the core exact-GP mean-and-prior oracle stays)
    "tests/pipeline/test_deep_gp_layers.py::test_a_regressor_with_a_kernel_per_layer_keeps_its_fixed_noise_to_the_bit_and_a_saved_run_predicts_the_same",  # 15.0 s idle (the core per-layer oracles stay)
    "tests/pipeline/test_full_batch.py::test_the_tied_ep_classifiers_sweeps_and_lbfgs_reach_the_minibatch_paths_optimum",  # 15.5 s idle (the sparse classifier's sweeps-and-L-BFGS check stays)
    "tests/pipeline/test_likelihood_fixed.py::test_a_fixed_student_t_parameter_keeps_its_bits_and_the_other_moves[student-t-scale-raw_scale-raw_dof-start1]",  # 13.9 s idle (the fixed dof stays)
    "tests/core/test_deep_gp.py::test_propagated_moments_match_monte_carlo[hidden2]",  # 49 s at load 15 (1–2 layers stay)
    "tests/core/test_deep_gp_map.py::test_a_linear_output_mean_through_a_hidden_gaussian_matches_monte_carlo[matern52]",  # 28 s at load 15
    "tests/pipeline/test_multiclass_defaults.py::test_a_saved_estimator_loads_with_its_inducing_points_capped_by_the_rows",  # ~10 s
    "tests/pipeline/test_multiclass_priors_means.py::test_a_lengthscale_prior_moves_the_fitted_lengthscales_towards_its_mode[DirectMultiClassGPClassifier]",  # ~5-10 s
    "tests/core/test_multi_output_regression.py::test_lmc_bound_is_the_dense_pep_formula_of_the_stacked_vector[0.5]",  # ~8 s idle: the padded-rows test checks it
    "tests/pipeline/test_class_groups.py::test_a_mean_and_a_prior_split_by_classes_are_their_step_of_all_classes",  # 17 s idle
    "tests/pipeline/test_store_estimators.py::test_a_fit_from_a_table_store_predicts_the_tables_raw_rows",  # 10-15 s
    "tests/pipeline/test_multiclass_priors_means.py::test_a_per_class_linear_mean_trains_reverts_far_away_and_comes_back_from_a_saved_run",  # 16 s idle
    "tests/core/test_likelihoods.py::test_expected_log_prob_is_the_small_alpha_limit[lik2-0.0]",  # 16 s idle
    "tests/pipeline/test_heteroscedastic_map.py::test_a_fixed_noise_level_is_kept_to_the_bit",  # 12 s idle
    "tests/pipeline/test_heteroscedastic_map.py::test_a_linear_mean_recovers_the_slope_reverts_far_away_and_a_saved_run_predicts_the_same",  # 24 s idle
    "tests/pipeline/test_map_distributed.py::test_a_map_fit_with_a_mean_is_bit_identical_on_two_workers[MultiClassGPClassifier]",  # 20 s idle
    "tests/pipeline/test_heteroscedastic.py::test_pep_predict_of_a_saved_run_writes_the_estimators_predictions",  # 17 s idle
    "tests/pipeline/test_ordinal.py::test_fixed_cut_points_keep_their_bits_and_free_ones_move",  # 12 s idle
    "tests/pipeline/test_likelihood_fixed.py::test_a_fixed_student_t_parameter_keeps_its_bits_and_the_other_moves[student-t-dof-raw_dof-raw_scale-start0]",  # 11 s idle
    "tests/flows/test_train_cli.py::test_sigkill_then_resume_ends_bit_identical[sparse-gp-classifier-store-settings0]",  # 100 s
    "tests/pipeline/test_likelihood_estimators.py::test_a_student_t_regressor_at_its_defaults_beats_the_gaussian_on_gross_outliers",  # 55 s
    "tests/pipeline/test_class_parallel_training.py::test_the_class_parallel_run_is_the_row_parallel_run_to_rounding",  # 44 s
    "tests/pipeline/test_sklearn_checks.py::test_check_estimator[CollapsedGPRegressor]",  # 41 s
    "tests/core/test_multiclass_likelihoods.py::test_a_likelihood_defined_here_trains_by_site_updates_and_draws_its_own_labels",  # 39 s
    "tests/pipeline/test_regressor_coverage.py::test_the_default_regressors_90_percent_intervals_cover_85_to_95_percent_of_diabetes",  # 39 s
    "tests/pipeline/test_store_precision.py::test_a_far_from_zero_column_and_times_train_to_the_error_of_the_centred_column",  # 25 s
    "tests/pipeline/test_optimizers.py::test_another_optimiser_changes_the_fit_and_adam_by_name_does_not",  # 19 s
    "tests/core/test_multiclass_whole_row.py::test_exact_log_partition_is_the_probability_that_the_label_s_latent_is_the_largest",  # 18 s
    "tests/core/test_quadrature_likelihoods.py::test_tilted_normaliser_and_moments_match_adaptive_quadrature[student-t--0]",  # 17 s
    "tests/pipeline/test_store_estimators.py::test_fit_from_a_store_takes_the_steps_of_fit_on_its_training_rows",  # 16 s
    "tests/pipeline/test_predict.py::test_classifier_predictions_are_the_models_in_the_users_labels",  # 16 s
    "tests/pipeline/test_summation.py::test_the_two_passes_keep_the_rows_and_equal_the_plain_block_terms",  # 16 s
    "tests/core/test_quadrature_likelihoods.py::test_tilted_normaliser_and_moments_match_adaptive_quadrature[poisson--]",  # 16 s
    "tests/pipeline/test_likelihood_estimators.py::test_a_noise_not_trained_keeps_its_value_to_the_bit_and_a_trained_one_moves[student-t]",  # 15 s
    "tests/core/test_likelihoods.py::test_expected_log_prob_is_the_small_alpha_limit[lik1-1.0]",  # 15 s
    "tests/pipeline/test_priors.py::test_a_saved_run_keeps_its_priors_and_predicts_the_same",  # 15 s
    "tests/pipeline/test_store_estimators.py::test_partial_fit_from_a_store_continues_as_on_its_training_rows",  # 15 s
    "tests/pipeline/test_optimizers.py::test_a_run_records_its_optimiser_and_loads_with_it",  # 15 s
    "tests/core/test_multiclass.py::test_minibatch_updates_of_one_batch_reach_the_fixed_point_of_its_copies",  # 14 s
    "tests/core/test_means.py::test_collapsed_evidence_with_a_mean_at_z_equal_x_is_the_exact_gp_evidence_of_y_less_the_mean[constant-1.0]",  # 13 s
    "tests/core/test_power_ep.py::test_exact_gaussian_site_updates_give_the_collapsed_posterior[1.0]",  # 13 s
    "tests/pipeline/test_class_groups.py::test_a_step_from_the_gathered_state_in_other_groups_continues_with_the_same_bits",  # 13 s
    "tests/core/test_power_ep.py::test_identical_sites_give_the_exact_evidence[1.0]",  # 13 s
    "tests/pipeline/test_priors.py::test_a_map_fit_in_process_and_on_two_workers_is_bit_identical",  # 13 s
    "tests/pipeline/test_store_estimators.py::test_fit_from_a_store_ends_as_pep_train_and_predicts_raw_rows_as_pep_predict",  # 12 s
    "tests/core/test_quadrature_likelihoods.py::test_tilted_normaliser_and_moments_match_adaptive_quadrature[negative-binomial--]",  # 12 s
    "tests/pipeline/test_kernel_settings.py::test_a_saved_run_rebuilds_its_kernel_and_predicts_bit_identically",  # 12 s
    "tests/core/test_multiclass_label_noise.py::test_label_noise_sep_keeps_site_precisions_non_negative_with_flipped_labels",  # 12 s
    "tests/core/test_power_ep.py::test_exact_gaussian_site_updates_give_the_collapsed_posterior[0.0]",  # 12 s
    "tests/pipeline/test_likelihood_estimators.py::test_a_noise_not_trained_keeps_its_value_to_the_bit_and_a_trained_one_moves[gaussian]",  # 12 s
    "tests/core/test_input_quadrature.py::test_moments_at_a_gaussian_input_match_monte_carlo[matern12]",  # 11 s
    "tests/pipeline/test_class_groups.py::test_a_lost_worker_of_the_groups_is_a_clear_error_that_says_how_to_resume",  # 11 s
    "tests/pipeline/test_estimators.py::test_bad_settings_are_rejected_by_name",  # 11 s
    "tests/pipeline/test_resident_engine.py::test_a_worker_lost_between_a_steps_two_passes_changes_nothing",  # 11 s
    "tests/pipeline/test_class_groups.py::test_a_rejected_site_update_leaves_every_class_as_it_was_as_the_step_of_all_classes_does",  # 10 s
    "tests/test_docs_results.py::test_the_check_command_passes_on_the_committed_pages",  # 10 s
    "tests/pipeline/test_latent.py::test_classifier_predict_f_agrees_with_its_own_sample_f_draws",  # 10 s
])


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items):
    """The tests of :data:`LEFT_TO_RELEASES` marked ``exhaustive``; then the tests marked ``long`` first, the rest
    in their order: pytest-xdist's workers then take the short ones as they free up (``--dist worksteal``) and end
    together, not one waiting on a long test collected last."""
    for item in items:
        if item.nodeid in LEFT_TO_RELEASES:
            item.add_marker(pytest.mark.exhaustive)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_unconfigure(config):
    if getattr(config, "_pep_compilation_cache", None):
        shutil.rmtree(config._pep_compilation_cache, ignore_errors=True)


@pytest.fixture(autouse=True)
def _float64():
    with pep_gp.core.float64():
        yield
    release_compiled_programs_if_crowded()  # one process runs the whole suite: stay below vm.max_map_count


SHARED_RUNS_ENV = "PEP_TEST_SHARED_DIR"
"""A directory that several test runs of one checkout share (``.ci/run`` gives its quick and end-to-end tiers
one): what one run's fixtures trained there, the next takes as it is."""


def shared_directory(tmp_path_factory, name: str) -> tuple[Path, FileLock]:
    """A directory of this test run that every pytest-xdist worker sees under one name, and the lock that makes
    one of them fill it while the others wait (without pytest-xdist: a directory of this process; with
    ``$PEP_TEST_SHARED_DIR``: one in that directory, which outlives the run)."""
    if os.environ.get(SHARED_RUNS_ENV):
        root = Path(os.environ[SHARED_RUNS_ENV])
    else:
        base = tmp_path_factory.getbasetemp()
        root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common directory
    return root / name, FileLock(root / f"{name}.lock")


def messy_run_once(tmp_path_factory, task: str) -> MessyRun:
    """:func:`~tests.messy_runs.messy_run` trained once per test run, by the first worker that asks: the tests
    only read it (those that write into a run copy it first)."""
    directory, lock = shared_directory(tmp_path_factory, f"messy-{task}")
    with lock:
        return messy_run(directory, task)


@pytest.fixture(scope="session")
def messy_classifier(tmp_path_factory):
    """A ``sparse-gp-classifier`` run trained by ``pep ingest`` and ``pep train`` on a messy CSV."""
    return messy_run_once(tmp_path_factory, "classification")


@pytest.fixture(scope="session")
def messy_regressor(tmp_path_factory):
    """A ``sparse-gp-regressor`` run trained by ``pep ingest`` and ``pep train`` on a messy CSV."""
    return messy_run_once(tmp_path_factory, "regression")


@pytest.fixture(scope="session")
def tiny_data() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The standard tiny data sets of :mod:`tests.tiny`, by task: ``"regression"``, ``"binary"``, ``"multiclass"``."""
    return tiny.data()
