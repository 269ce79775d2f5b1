"""The results pages' tables, regenerated from the committed ``benchmarks/results/*.json`` by the same
functions that print them after a benchmark run.

A page marks each generated table with the committed runs it shows::

    <!-- generated: compare_gpu -->
    …the table…
    <!-- /generated -->

The registry is the runs themselves: each JSON records the ``python -m benchmarks.MODULE …`` that wrote it,
and that module's ``table(result)`` draws it (a mark naming several runs shows their rows under one header);
only the few tables drawn from several runs in a layout of their own are listed (:data:`COMPOSITE`). This
command rewrites what lies between the marks (the prose around them is the page's own), on the results
pages, the how-to pages and README.md (whose model table ``python -m docs.generate`` owns):

    python -m docs.results            # rewrite the pages' tables of results
    python -m docs.results --check    # exit 1 naming every page that differs from its JSON

``tests/test_docs_results.py`` runs the check.
"""

from __future__ import annotations

import json
import re
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Callable

from . import page_command

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGES = DOCS / "results"
README = ROOT / "README.md"
NOT_RESULTS = {"models"}  # README.md's model table, written by docs.generate
MARKED = re.compile(r"(<!-- generated: (\S+(?: \S+)*) -->\n)(.*?)\n?(<!-- /generated -->)", re.S)  # an empty block too


def filled(match: re.Match, table: str) -> str:
    """A marked block of :data:`MARKED` with ``table`` between its marks (one line break before the
    closing mark, whether the block was empty or not)."""
    return match.group(1) + table + "\n" + match.group(4)


def result(name: str) -> dict:
    """The committed JSON ``benchmarks/results/NAME.json``."""
    return json.loads((RESULTS / f"{name}.json").read_text())


def module_of(name: str) -> ModuleType:
    """The benchmark module that wrote the committed run ``name``: the ``python -m MODULE`` of its recorded command."""
    command = result(name).get("command", "").split()
    if command[:2] != ["python", "-m"] or len(command) < 3 or not command[2].startswith("benchmarks."):
        raise KeyError(f"benchmarks/results/{name}.json records no `python -m benchmarks.…` command")
    return import_module(command[2])


def runs_table(names: list[str]) -> str:
    """The table of the committed runs ``names``, as their benchmark prints it: each run's module renders its own
    JSON with ``table(result)``, and the rows of further runs follow the first's under its header."""
    first, *more = (module_of(name).table(result(name)).splitlines() for name in names)
    return "\n".join(first + [row for lines in more for row in lines[2:]])


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


def deep_gp(kind: str) -> Callable[[], str]:
    """A table of ``bench_dgp`` over every committed deep-GP run of its page (``bench_dgp.PAGE_RESULTS``):
    ``table`` (the page's), ``readme_table``, ``paper_table`` (beside Bui et al. 2016, Table 3) or ``claims_table``."""
    def drawn() -> str:
        from benchmarks import bench_dgp

        return getattr(bench_dgp, kind)([result(name) for name in bench_dgp.PAGE_RESULTS])

    return drawn


def everyday_readme() -> str:
    """README's speed row: ``bench_everyday``'s and ``bench_everyday_slow``'s runs, by group of estimators."""
    from benchmarks import bench_everyday

    return bench_everyday.readme_table([result("bench_everyday"), result("bench_everyday_slow")])


COMPOSITE: dict[str, Callable[[], str]] = {
    "waits": waits_table, "bench_dgp": deep_gp("table"), "bench_dgp_readme": deep_gp("readme_table"),
    "bench_dgp_paper": deep_gp("paper_table"), "bench_dgp_claims": deep_gp("claims_table"),
    "bench_everyday_readme": everyday_readme}
"""The tables drawn from several runs in a layout of their own, by their mark's name; every other mark names
the committed runs it shows (``<!-- generated: RUN [RUN …] -->``) and :func:`runs_table` draws it."""


def table_of(mark: str) -> str:
    """The table a mark asks for: a :data:`COMPOSITE` one by name, else :func:`runs_table` of the runs it names."""
    return COMPOSITE[mark]() if mark in COMPOSITE else runs_table(mark.split())


def render(text: str, page: str) -> str:
    """``text`` with every marked table regenerated.

    Raises:
        KeyError: a mark names no known table (the message names the page and the mark).
    """
    def fill(match: re.Match) -> str:
        if match.group(2) in NOT_RESULTS:
            return match.group(0)
        try:
            return filled(match, table_of(match.group(2)))
        except (KeyError, FileNotFoundError) as error:
            raise KeyError(f"{page}: the mark {match.group(2)!r} names no committed run or table ({error})") from None

    return MARKED.sub(fill, text)


def marks(text: str) -> list[str]:
    """The names of the tables ``text`` marks, in order."""
    return [match.group(2) for match in MARKED.finditer(text)]


def pages() -> list[Path]:
    """The pages with tables of results: docs/results/*.md, docs/how-to/*.md and README.md."""
    return [*sorted(PAGES.glob("*.md")), *sorted((DOCS / "how-to").glob("*.md")), README]


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
