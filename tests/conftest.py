"""Real servers for the suite come from the project's own cluster helper."""

pytest_plugins = ["tests.cluster_fixtures", "tests.tls_gateway"]
