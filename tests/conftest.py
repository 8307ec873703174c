"""Real servers for the suite come from the project's own cluster helper."""

import gc
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.cluster_fixtures", "tests.tls_gateway"]


@pytest.fixture(autouse=True, scope="module")
def _collect_garbage_as_each_module_ends() -> Iterator[None]:
    """A resource a module's tests left unclosed fails that module (ResourceWarning is an error),
    not whichever later test the collector happens to run in. Once per module: a collection
    costs about 80 ms with the suite loaded, too much to pay after every test."""
    yield
    gc.collect()
