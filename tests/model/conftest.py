"""One search of the doc's main configuration, shared by the verdict tests and the doc test."""

from __future__ import annotations

import argparse

import pytest

from fencegate.model.cli import Cache, add_check_arguments, run_checks
from fencegate.model.runner import CheckResult
from fencegate.model.trail import Trail

# The first table of docs/model.md: every variant and property, 2 clients, 3 nodes.
MAIN_ARGS = ["--variant", "all", "--clients", "2", "--nodes", "3"]


def parse_check_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    add_check_arguments(parser)
    return parser.parse_args(argv)


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
    return run_checks(parse_check_args(MAIN_ARGS), search_cache)


@pytest.fixture(scope="session")
def by_key(main_results: list[CheckResult]) -> dict[tuple[str, str], CheckResult]:
    return {(r.variant, r.prop): r for r in main_results}
