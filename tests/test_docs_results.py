"""The results pages' tables are those the benchmarks print from their committed JSON (claims equal checks:
editing a number on a page, or re-running a benchmark without regenerating its page, fails here), and each
page regenerates byte-identically with ``python -m docs.results``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_dgp_multiclass
from benchmarks.bench_dgp import CLAIMS, PAGE_RESULTS, claims, claims_table, paired, table as deep_gp_table, tagged_rows, verdict
from benchmarks.bench_qp import corrected_standard_error, summarise, table as qp_table
from benchmarks.compare import table as comparison_table
from docs import results

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted((ROOT / "benchmarks" / "results").glob("compare*.json"))
QP = results.result("bench_qp")
DEEP_GP = [results.result(name) for name in PAGE_RESULTS]


def page(name: str) -> str:
    return (ROOT / "docs" / "results" / name).read_text()


def test_there_are_committed_comparison_runs():
    assert {path.stem for path in RUNS} >= {"compare_gpu", "compare_gpu_cache2000"}


@pytest.mark.parametrize("path", RUNS, ids=[path.stem for path in RUNS])
def test_the_gpytorch_page_holds_the_table_of_each_comparison_run(path):
    assert comparison_table(json.loads(path.read_text())) in page("gpytorch.md")
    assert path.stem in results.marks(page("gpytorch.md"))


def test_the_qp_page_holds_the_table_of_the_committed_qp_run():
    assert qp_table(QP) in page("qp.md")
    assert qp_table(results.result("bench_qp_table1")) in page("qp.md")  # Table 1 on the paper's own sets


def test_the_power_ep_page_holds_the_tables_of_the_committed_alpha_study():
    from benchmarks.bench_power_ep import NAME, table

    study = results.result(NAME)
    assert study["synthetic"] and study["classification"]
    assert table(study) in page("power-ep.md") and NAME in results.marks(page("power-ep.md"))


def test_the_power_ep_page_holds_the_real_regression_table_and_its_win_fractions_recomputed_from_the_splits():
    from benchmarks.bench_power_ep import ALPHAS, NAME, PAPER_WINS, REGRESSION, regression_table

    runs = results.result(NAME)["regression"]
    assert regression_table(runs) in page("power-ep.md")
    experiments = {(name, m, split) for name, m, _, split in (key.split("/") for key in runs) if m != "full"}
    assert {name for name, _, _ in experiments} == set(REGRESSION)
    assert all(f"{n}/{m}/{alpha}/{s}" in runs for n, m, s in experiments for alpha in ALPHAS)  # no α missing
    labels = {0.0: "0 (VFE)", 0.5: "0.5", 1.0: "1 (EP)"}
    for first, second, metric, paper in PAPER_WINS:  # each pooled fraction, counted here from the per-split records
        wins = sum(runs[f"{n}/{m}/{first}/{s}"][metric] < runs[f"{n}/{m}/{second}/{s}"][metric] for n, m, s in experiments)
        row = (f"| {labels[first]} beats {labels[second]} | {metric.upper()} | {paper:.0%} | "
               f"{wins / len(experiments):.0%} ({wins}/{len(experiments)}) |")
        assert row in page("power-ep.md")


def test_the_likelihoods_page_holds_the_table_of_the_committed_run():
    from benchmarks.bench_likelihoods import NAME, SECTIONS, table

    run = results.result(NAME)
    assert set(SECTIONS) <= set(run) and set(run["coverage"]) == {"boston", "concrete"}
    assert table(run) in page("likelihoods.md") and NAME in results.marks(page("likelihoods.md"))


def test_the_kernels_page_holds_the_table_of_the_committed_kernel_comparison():
    from benchmarks.bench_kernels import CLASSIFICATION, NAME, REGRESSION, table

    runs = results.result(NAME)["runs"]
    assert {key.split("/")[0] for key in runs} == set(REGRESSION + CLASSIFICATION)  # five real tables
    assert {key.split("/")[1] for key in runs} == {"pep", "sklearn", "warm-up"}
    assert table(results.result(NAME)) in page("kernels.md") and NAME in results.marks(page("kernels.md"))


def test_the_deep_gp_page_holds_the_table_of_the_committed_deep_gp_runs():
    assert deep_gp_table(DEEP_GP) in page("deep-gp.md")


@pytest.mark.parametrize("path", results.pages(), ids=lambda path: path.name)
def test_each_results_page_and_the_readme_regenerate_byte_identically(path):
    assert results.render(path.read_text(), path.name) == path.read_text()


def test_the_command_rewrites_an_edited_table_and_its_check_fails_before(tmp_path, monkeypatch):
    """An edited number is caught by ``--check`` and put back by the command (on a copy of the pages)."""
    pages = tmp_path / "results"
    pages.mkdir()
    original = page("qp.md")
    edited = original.replace(qp_table(QP), qp_table(QP).replace("0.0698", "0.0600"), 1)
    assert edited != original
    (pages / "qp.md").write_text(edited)
    (tmp_path / "README.md").write_text(results.README.read_text())
    monkeypatch.setattr(results, "PAGES", pages)
    monkeypatch.setattr(results, "README", tmp_path / "README.md")
    assert results.main(["--check"]) == 1
    assert results.main([]) == 0
    assert (pages / "qp.md").read_text() == original


def test_a_mark_naming_no_table_is_refused():
    with pytest.raises(KeyError, match="x.md: the mark 'nonesuch' names no committed run or table"):
        results.render("<!-- generated: nonesuch -->\n|a|\n<!-- /generated -->", "x.md")


def test_the_registry_is_the_runs_commands(monkeypatch):
    """Every mark but the composite ones is drawn by the module its runs' JSON names: a mark's table is its
    runs' ``table(result)``, each page's block is that, and a run that records no benchmark command is refused."""
    drawn = [mark for path in results.pages() for mark in results.marks(path.read_text())
             if mark not in results.COMPOSITE and mark not in results.NOT_RESULTS]
    assert len(drawn) > 40
    for mark in drawn:
        names = mark.split()
        assert all(results.module_of(name).__name__ == results.result(name)["command"].split()[2] for name in names)
    monkeypatch.setattr(results, "result", lambda name: {"command": "python -c pass"})
    with pytest.raises(KeyError, match="benchmarks/results/other.json records no `python -m benchmarks"):
        results.module_of("other")


@pytest.mark.heavy
def test_the_check_command_passes_on_the_committed_pages():
    done = subprocess.run([sys.executable, "-m", "docs.results", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_multiclass_deep_gp_summary_and_verdicts_are_those_of_its_splits():
    run = results.result(bench_dgp_multiclass.NAME)
    assert bench_dgp_multiclass.summarise(run["runs"]) == run["summary"]
    assert bench_dgp_multiclass.table(run) in page("deep-gp.md")
    glass = run["summary"]["glass"]["dgp1"]  # the page's claim: D-1-K is worse than the GP on glass
    assert bench_dgp_multiclass.verdict(glass) == "worse than the GP" and glass["splits"] == 10


def test_the_committed_qp_summaries_are_those_of_the_committed_folds():
    for data in QP["classification"].values():
        assert summarise(data["folds"], ["nll", "error"]) == data["summary"]


def test_corrected_standard_error_adds_the_shared_training_rows_term():
    """Nadeau & Bengio's ``√((1/J + 1/(k − 1))·s²)``: by hand for J = 4 differences of 2-fold CV, and
    √(1 + J/(k − 1)) times the plain standard error for 10 repeats of 10-fold CV."""
    assert corrected_standard_error([1.0, 2.0, 3.0, 4.0], 2) == pytest.approx(np.sqrt((0.25 + 1.0) * 5 / 3), rel=1e-14)
    differences = np.random.default_rng(0).normal(size=100)
    plain = differences.std(ddof=1) / 10
    assert corrected_standard_error(differences, 10) == pytest.approx(plain * np.sqrt(1 + 100 / 9), rel=1e-12)


def test_the_deep_gp_table_states_both_rules_for_both_libraries():
    header = deep_gp_table(DEEP_GP).splitlines()[0]
    assert "Gaussian" in header and "mixture of 100" in header
    for result in DEEP_GP:
        for row in result["rows"]:
            assert np.isfinite(row["test_ll"]) and np.isfinite(row["test_ll_mixture"])


def test_the_deep_gp_page_reads_each_of_the_paper_s_three_claims_on_all_twenty_splits():
    """Bui et al. (2016)'s relative claims on Boston and concrete: DGP-1/2/3 against the GP at M = 50 and 100 (12
    comparisons), DGP-2/3 against DGP-1 (8), every model at M = 100 against M = 50 (8), each paired over 20 splits."""
    rows = claims(tagged_rows(DEEP_GP))
    assert [sum(r["claim"] == claim for r in rows) for claim, _ in CLAIMS] == [12, 8, 8]
    assert {r["splits"] for r in rows} == {20}
    assert claims_table(DEEP_GP) in page("deep-gp.md")


def test_the_chile_probit_summary_is_that_of_its_splits_and_on_the_multiclass_page():
    from benchmarks.bench_chile_probit import NAME, table

    run = results.result(NAME)
    for fit, values in run["test_nll"].items():
        assert len(values) == run["splits"] == 3 and run["summary"][fit]["test_nll"] == pytest.approx(np.mean(values), abs=1e-15)
    assert table(run) in page("multiclass.md")


def test_a_claim_is_confirmed_or_contradicted_only_beyond_two_standard_errors():
    assert [verdict(d, 0.1) for d in (0.21, 0.19, -0.19, -0.21)] == [
        "confirmed", "not shown (within 2 s.e.)", "not shown (within 2 s.e.)", "contradicted"]


def test_the_binary_deep_gp_summary_is_that_of_its_splits_on_every_set_of_the_paper_s_table_1():
    run = results.result("bench_dgp_binary")
    assert bench_dgp_multiclass.summarise(run["runs"]) == run["summary"]
    assert set(run["summary"]) == set(bench_dgp_multiclass.BINARY)
    assert bench_dgp_multiclass.table(run) in page("deep-gp.md")


@pytest.mark.parametrize("index", range(len(PAGE_RESULTS)))
def test_the_committed_paired_differences_are_those_of_the_stored_splits(index):
    assert paired(DEEP_GP[index]["rows"]) == DEEP_GP[index]["paired"]


@pytest.mark.parametrize("name", ["multiclass_uci", "multiclass_uci_converged", "multiclass_uci_wine_iris"])
def test_the_multiclass_tables_are_those_the_runs_printed_and_stored(name):
    from benchmarks.bench_multiclass_uci import summary_table, table

    stored = results.result(name)
    assert summary_table(stored["summary"]) == stored["table"]
    assert table(stored) == summary_table(stored["summary"]).replace("\nRan: ", "\n\nRan: ")
    assert results.runs_table([name]) == table(stored) and table(stored) in page("multiclass.md")


def test_the_multiclass_paper_table_has_every_ep_and_sep_cell_of_tables_2_and_3():
    from benchmarks.bench_multiclass_uci import FRACTIONS, METHODS, PAPER, PAPER_SETS

    assert set(PAPER) == {(n, f, m) for n in PAPER_SETS for f in FRACTIONS for m in METHODS}
    # spot checks against the paper's printed rows (NLL, ±, error, ±)
    assert PAPER["vowel", 0.20, "ep"] == (0.16, 0.01, 0.03, 0.0)
    assert PAPER["satellite", 0.20, "sep"] == (0.36, 0.0, 0.12, 0.0)
    assert PAPER["glass", 0.10, "sep"] == (0.79, 0.07, 0.30, 0.02)
    assert PAPER["waveform", 0.05, "ep"] == (0.36, 0.0, 0.15, 0.0)


def test_the_multiclass_difference_is_in_standard_errors_and_marks_means_outside_the_paper_s_bar():
    from benchmarks.bench_multiclass_uci import difference

    assert difference((0.10, 0.01), (0.07, 0.01)) == "+2.1 †"  # 0.03 / √(0.01² + 0.01²)
    assert difference((0.075, 0.01), (0.07, 0.01)) == "+0.4"  # inside ± 0.01
    assert difference((0.304, 0.002), (0.30, 0.0)) == "+2.0"  # a printed ± 0.00 is ± 0.005
    assert difference((0.31, 0.002), (0.30, 0.0)) == "+5.0 †"
    assert difference((0.30, float("nan")), (0.30, 0.0)) == "—"  # one split, a bar of 0: no scale


def test_the_multiclass_units_cover_each_setting_s_splits_once_and_split_i_does_not_depend_on_the_count():
    import argparse

    from benchmarks.bench_multiclass_uci import _splits, plan

    shapes = {"satellite": (6435, 6), "wine": (178, 3)}
    for jobs, chunk in ((1, None), (15, None), (2, 3)):
        args = argparse.Namespace(datasets=["satellite", "wine"], splits=7, splits_of={"satellite": 4}, jobs=jobs,
                                  gpu=["satellite"], chunk=chunk)
        covered = {}
        for unit in plan(args, shapes):
            covered.setdefault(unit.setting, []).extend(range(unit.first, unit.stop))
            assert unit.gpu == (unit.name == "satellite")
        assert len(covered) == 12
        assert all(sorted(split) == list(range(4 if n == "satellite" else 7)) for (n, _, _), split in covered.items())
    merged = frozenset({("wine", 0.05, "ep"), ("satellite", 0.2, "sep")})  # --merge: settings already in the file
    assert {unit.setting for unit in plan(args, shapes, merged)} == set(covered) - merged
    few, more = (_splits("wine", argparse.Namespace(splits=k, seed=0))[2] for k in (2, 5))
    assert all((a == b).all() for pair_few, pair_more in zip(few, more) for a, b in zip(pair_few, pair_more))


def test_the_committed_multiclass_run_says_what_ran():
    stored = results.result("multiclass_uci")
    for row in stored["summary"]:
        runs = [r for r in stored["runs"] if (r["dataset"], r["fraction"], r["method"]) ==
                (row["dataset"], row["fraction"], row["method"])]
        assert sorted(r["split"] for r in runs) == list(range(row["splits"]))
        assert {r["steps"] for r in runs} == {row["iterations"]}
    assert stored["table"].splitlines()[-1].startswith("Ran: ")


def test_the_mean_steps_on_the_multiclass_page_are_those_of_the_converged_runs():
    runs = results.result("multiclass_uci_converged")["runs"]
    means = {(method, fraction): round(float(np.mean([r["steps"] for r in runs
                                                      if (r["method"], r["fraction"]) == (method, fraction)])))
             for method in ("ep", "sep") for fraction in (0.05, 0.1, 0.2)}
    sentence = (f"EP {means['ep', 0.05]} / {means['ep', 0.1]} / {means['ep', 0.2]} and "
                f"SEP {means['sep', 0.05]} / {means['sep', 0.1]} / {means['sep', 0.2]} at 5 / 10 / 20 %")
    assert sentence in page("multiclass.md")


def comparison_row(name: str, minibatch: str) -> list[str]:
    """The cells of one minibatch's row in ``benchmarks.compare``'s table of the committed run ``name``."""
    (row,) = [line for line in comparison_table_lines(name) if line.startswith(f"| {minibatch} |")]
    return [cell.strip() for cell in row.strip("|").split("|")]


def comparison_table_lines(name: str) -> list[str]:
    return comparison_table(results.result(name)).splitlines()


def test_the_readme_s_measured_comparison_is_that_of_the_committed_runs():
    """README's "Why pep" rows: error / NLL after 4 CPU epochs at minibatch 200 (pep, GPyTorch) and pep's
    seconds per epoch over GPyTorch's (CPU; GPU with the block cache of 2000 MB)."""
    readme = (ROOT / "README.md").read_text()
    cpu, gpu = comparison_row("compare", "200"), comparison_row("compare_gpu_cache2000", "200")
    assert "4 epochs" in comparison_table_lines("compare")[0]
    assert f"| Fashion-MNIST, M = 200 per class, 4 epochs, CPU: test error / NLL | {cpu[4]} | {cpu[5]} | not measured |" in readme
    assert f"| {cpu[3]}× / {gpu[3]}× GPyTorch's |" in readme


def test_the_engine_run_compared_both_engines_and_its_scaling_model_is_made_of_measured_terms():
    from benchmarks.bench_engine import BACKENDS, BANDWIDTH, ENGINES, scaling_model

    engine = results.result("bench_engine")
    for inducing, runs in engine["runs"].items():
        assert [set(runs[name]) for name in ENGINES] == [set(BACKENDS)] * len(ENGINES), inducing
        assert len({row["params_sha256"] for row in runs["new"].values()}) == 1, inducing  # the same bits everywhere
    rows = engine["runs"]["200"]["new"]
    one, model = rows["local:1:pinned"], scaling_model(rows)
    assert model["predicted"]["1"]["seconds_per_step"] == pytest.approx(
        one["coordinator_seconds"] + 2 * one["pass_overhead_seconds"] + one["worker_seconds"]
        + one["payload_bytes_per_worker"] / BANDWIDTH, abs=1e-4)
    assert "load average" in engine["uptime_before"] and "load average" in engine["uptime_after"]


def test_the_airline_scale_run_ingested_the_paper_s_rows_as_synthetic_and_its_coordinator_did_not_grow():
    scale = results.result("bench_airline_scale")
    assert scale["ingest"]["rows"] == 2_127_068 and scale["ingest"]["source"].startswith("SYNTHETIC")
    synthetic, bundled = scale["synthetic_run"], scale["bundled_run"]
    assert synthetic["n_train"] > 8 * bundled["n_train"]
    assert synthetic["coordinator_peak_rss_mb"] <= 1.1 * bundled["coordinator_peak_rss_mb"]
    readme_row = (f"| one epoch on {scale['ingest']['rows']:,} rows (synthetic airline flights, `local:2`) | coordinator "
                  f"memory within 10 % of a {bundled['n_train']:,}-row run's")
    assert readme_row in (ROOT / "README.md").read_text()


def test_an_empty_marked_block_is_filled_without_swallowing_the_prose_after_it():
    text = ("<!-- generated: bench_qp -->\n<!-- /generated -->\n\nprose between\n\n"
            "<!-- generated: bench_qp -->\nstale table\n<!-- /generated -->\n")
    rendered = results.render(text, "new.md")
    assert "prose between" in rendered and "stale table" not in rendered
    assert rendered.count(qp_table(QP)) == 2 and results.marks(rendered) == ["bench_qp", "bench_qp"]


def test_the_readme_s_deep_gp_rows_are_those_of_the_committed_run_by_both_rules():
    rows = {(r["dataset"], r["model"]): r for r in results.result("bench_dgp_fullbatch")["rows"] if r["M"] == 100}
    ratios = {p["dataset"]: p["seconds_ratio"] for p in results.result("bench_dgp_fullbatch")["paired"]
              if (p["model"], p["versus"], p["M"]) == ("dgp2", "gpytorch", 100)}

    def both(model: str) -> str:
        gaussian = " / ".join(f"{rows[name, model]['test_ll']:.3f}" for name in ("boston", "concrete"))
        mixture = " / ".join(f"{rows[name, model]['test_ll_mixture']:.3f}" for name in ("boston", "concrete"))
        return f"{gaussian} ({mixture})".replace("-", "−")

    readme = (ROOT / "README.md").read_text()
    assert all(len(rows[name, model]["splits"]) == 20 for name in ("boston", "concrete") for model in ("dgp2", "gpytorch"))
    assert (f"| deep GP, width 2, M = 100, Boston / concrete, 20 splits: test log-likelihood, Gaussian rule "
            f"(mixture of 100) | {both('dgp2')} | {both('gpytorch')} | not measured |") in readme
    assert f"| {ratios['boston']:.2f}× / {ratios['concrete']:.2f}× GPyTorch's | 1 |" in readme


def test_the_readme_pairs_each_deep_gp_of_the_grid_with_gpytorch_s_on_all_20_splits():
    """Bui et al. (2016)'s grid in README.md: widths 2 and 2+2 at M = 50 and 100, each against GPyTorch's
    ``DeepGP`` of the same widths, on every split (``python -m docs.results`` writes the table)."""
    table = results.table_of("bench_dgp_readme")
    assert table in (ROOT / "README.md").read_text()
    rows = table.splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == ["| width 2, M = 50", "| widths 2+2, M = 50",
                                                      "| width 2, M = 100", "| widths 2+2, M = 100"]
    assert all(row.endswith("| 20 |") for row in rows)


def test_the_deep_gp_estimator_at_its_defaults_fitted_the_protocol_s_models_split_by_split():
    """The results page's claim that ``DeepGPRegressor`` at its defaults is Bui et al. (2016)'s protocol:
    in ``bench_dgp_defaults.json`` each split's fit has the protocol fit's energy trace and test metrics
    (``bench_dgp_fullbatch.json``), bit for bit, after 1,000 steps."""
    def splits(name, model):
        return {r["dataset"]: r["splits"] for r in results.result(name)["rows"] if r["model"] == model and r["M"] == 100}

    defaults, protocol = splits("bench_dgp_defaults", "dgp2-defaults"), splits("bench_dgp_fullbatch", "dgp2")
    assert sorted(defaults) == sorted(protocol) == ["boston", "concrete"]
    keys = ("energy_windows", "test_ll", "test_ll_mixture", "rmse")
    for dataset, fits in defaults.items():
        assert len(fits) == len(protocol[dataset]) == 20 and {fit["steps"] for fit in fits} == {1000}
        assert [[fit[k] for k in keys] for fit in fits] == [[fit[k] for k in keys] for fit in protocol[dataset]]


def test_the_class_parallel_tables_and_speed_ups_are_those_of_the_committed_run():
    from benchmarks.bench_class_parallel import table

    run = results.result("bench_class_parallel")
    assert table(run) in page("benchmarks.md") and "bench_class_parallel" in results.marks(page("benchmarks.md"))
    variants = run["variants"]
    assert run["speedup_2_workers_over_1"]["min"] == round(variants["workers-1"]["min_s"] / variants["workers-2"]["min_s"], 3)
    assert run["class_parallel_bits_agree"] == (len({v["params_sha256"] for k, v in variants.items() if k != "today"}) == 1)
    trained = run["train"]["runs"]
    assert run["train"]["speedup_2_workers_over_1_by_classes"] == round(
        trained["local:1:pinned by classes"]["seconds_per_epoch"] / trained["local:2:pinned by classes"]["seconds_per_epoch"], 3)
