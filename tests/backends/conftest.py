"""The backends folder's fixtures: the fault tests' servers and guards (``fault_rig``), and
a server that never answers (``redis_rig``)."""

from tests.backends.fault_rig import cluster_nodes, connect, nodes, redis_nodes
from tests.backends.redis_rig import silent_server

__all__ = ["cluster_nodes", "connect", "nodes", "redis_nodes", "silent_server"]
