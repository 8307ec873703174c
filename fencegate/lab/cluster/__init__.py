"""Real servers on loopback for tests, the lab, benchmarks and the demo."""

from fencegate.cli import TERMINATED, until_terminated
from fencegate.lab.cluster.errors import ClusterError, MissingServerError, ServerStartError
from fencegate.lab.cluster.local import ClusterSpec, LocalCluster
from fencegate.lab.cluster.servers import Node

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
