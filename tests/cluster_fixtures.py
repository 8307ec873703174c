"""pytest fixtures over `LocalCluster`, loaded by `tests/conftest.py`.

Session-scoped clusters are started once per run and shared: tests that use
them must leave every node running (use distinct resource names). A test that
injects faults takes `cluster_factory` and gets servers of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from fencegate.lab.cluster.local import ClusterSpec, LocalCluster


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Five independent redis-server masters, shared by the session."""
    with LocalCluster.running(ClusterSpec(redis=5), tmp_path_factory.mktemp("redis")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def zookeeper_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One standalone ZooKeeper, shared by the session."""
    spec = ClusterSpec(redis=0, zookeeper=True)
    with LocalCluster.running(spec, tmp_path_factory.mktemp("zookeeper")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def postgres_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One throwaway PostgreSQL, shared by the session."""
    spec = ClusterSpec(redis=0, postgres=True)
    with LocalCluster.running(spec, tmp_path_factory.mktemp("postgres")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def postgres_tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A PostgreSQL that speaks TLS only and requires a client certificate (clientcert=verify-full);
    `postgres_dsn` carries sslmode=verify-full and the client's files. Shared by the session."""
    spec = ClusterSpec(redis=0, postgres_tls="mutual")
    with LocalCluster.running(spec, tmp_path_factory.mktemp("postgres-tls")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def zookeeper_tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A ZooKeeper on a secure client port only, requiring a client certificate; `zookeeper_url`
    carries use_ssl and the client's files. Shared by the session."""
    spec = ClusterSpec(redis=0, zookeeper_tls="mutual")
    with LocalCluster.running(spec, tmp_path_factory.mktemp("zookeeper-tls")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-member etcd cluster, shared by the session (`cluster.etcd` is its token source URL)."""
    spec = ClusterSpec(redis=0, etcd=3)
    with LocalCluster.running(spec, tmp_path_factory.mktemp("etcd")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def etcd_tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-member etcd cluster serving clients over https only and requiring a client certificate;
    `cluster.etcd` carries use_ssl, ca, certfile and keyfile. Shared by the session."""
    spec = ClusterSpec(redis=0, etcd=3, etcd_tls="mutual")
    with LocalCluster.running(spec, tmp_path_factory.mktemp("etcd-tls")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def etcd_server_tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One etcd member over https only that requires no client certificate (`cluster.etcd` carries
    use_ssl and ca). Shared by the session."""
    spec = ClusterSpec(redis=0, etcd=1, etcd_tls="server")
    with LocalCluster.running(spec, tmp_path_factory.mktemp("etcd-server-tls")) as cluster:
        yield cluster


@pytest.fixture
def cluster_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[ClusterSpec], LocalCluster]]:
    """Start private clusters for fault tests; all of them stop when the test ends."""
    started: list[LocalCluster] = []

    def start(spec: ClusterSpec) -> LocalCluster:
        cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
        started.append(cluster)
        return cluster.up(spec)

    yield start
    for cluster in reversed(started):
        cluster.stop_all()


@pytest.fixture(scope="session")
def s3_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One SeaweedFS S3 store (`cluster.s3`: endpoint, keys, bucket), shared by the session: tests use
    distinct key prefixes."""
    spec = ClusterSpec(redis=0, s3=True)
    with LocalCluster.running(spec, tmp_path_factory.mktemp("s3")) as cluster:
        yield cluster
