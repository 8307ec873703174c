"""One search of the doc's main configuration, shared by the verdict tests and the doc test.

The searches of many variants run two at a time (`search_in_parallel`): each
is its own processes (spin, gcc, pan) and the machine has two cores, so a
thread per search is enough and the results are those of a run one by one.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

import pytest

from fencegate.model.cli import Cache, add_check_arguments, run_checks
from fencegate.model.runner import CheckResult
from fencegate.model.trail import Trail
from fencegate.model.variants import PROPERTIES, VARIANTS, applicable, pick

# The first table of docs/model.md: every variant and property, 2 clients, 3 nodes.
MAIN_ARGS = ["--variant", "all", "--clients", "2", "--nodes", "3"]


def parse_check_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    add_check_arguments(parser)
    return parser.parse_args(argv)


SEARCHERS = 2  # searches at once: one per core


def search_in_parallel(argvs: list[list[str]], cache: Cache) -> None:
    """Search every variant of every `argvs` (check arguments) into `cache`, SEARCHERS at a time; the
    runs of those arguments then find all their results there."""
    jobs: dict[tuple[object, ...], argparse.Namespace] = {}
    for argv in argvs:
        args = parse_check_args([arg for arg in argv if arg != "--trails"])  # how a doc block is drawn
        props = pick(args.property, PROPERTIES, "property")
        for variant in pick(args.variant, VARIANTS, "variant"):
            if applicable(variant, props):  # a variant of the other model has none of these properties
                one = argparse.Namespace(**{**vars(args), "variant": variant})
                jobs.setdefault(tuple(sorted(vars(one).items())), one)
    with ThreadPoolExecutor(SEARCHERS) as pool:
        for _ in pool.map(lambda one: run_checks(one, cache), jobs.values()):
            pass  # each result is in the cache; this re-raises a search's error


def counterexample(result: CheckResult) -> Trail:
    """The trail of a property the search found violated."""
    assert result.verdict == "violated", result
    assert result.trail is not None
    return result.trail


@pytest.fixture(scope="session")
def search_cache() -> Cache:
    """Searches already run in this session, shared so no configuration is searched twice."""
    return {}


@pytest.fixture(scope="session")
def main_results(search_cache: Cache) -> list[CheckResult]:
    search_in_parallel([MAIN_ARGS], search_cache)
    return run_checks(parse_check_args(MAIN_ARGS), search_cache)


@pytest.fixture(scope="session")
def by_key(main_results: list[CheckResult]) -> dict[tuple[str, str], CheckResult]:
    return {(r.variant, r.prop): r for r in main_results}
