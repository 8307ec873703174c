"""Real servers on loopback for tests, the lab, benchmarks and the demo."""

from fencegate.lab.cluster.errors import ClusterError, MissingServerError, ServerStartError
from fencegate.lab.cluster.local import ClusterSpec, LocalCluster
from fencegate.lab.cluster.servers import Node
from fencegate.lab.cluster.terminate import TERMINATED, until_terminated

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
