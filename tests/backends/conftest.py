"""The backends folder's fixtures: the fault tests' servers and guards (``fault_rig``)."""

from tests.backends.fault_rig import cluster_nodes, connect, nodes, redis_nodes

__all__ = ["cluster_nodes", "connect", "nodes", "redis_nodes"]
