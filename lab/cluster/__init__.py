"""Real servers on loopback for tests, the lab, benchmarks and the demo."""

from lab.cluster.errors import ClusterError, MissingServerError, ServerStartError
from lab.cluster.local import ClusterSpec, LocalCluster
from lab.cluster.servers import Node
from lab.cluster.terminate import TERMINATED, until_terminated

__all__ = [
    "TERMINATED",
    "ClusterError",
    "ClusterSpec",
    "LocalCluster",
    "MissingServerError",
    "Node",
    "ServerStartError",
    "until_terminated",
]
