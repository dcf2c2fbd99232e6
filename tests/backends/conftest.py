"""The backends folder's fixtures: the fault tests' servers and guards (``fault_rig``), a
server that never answers (``redis_rig``), and a client of db 1, where the bin tests keep
their bins, and clients of any db closed after the test (``bin_rig``)."""

from tests.backends.bin_rig import db1, db_client
from tests.backends.fault_rig import cluster_nodes, connect, nodes, redis_nodes
from tests.backends.redis_rig import silent_server

__all__ = [
    "cluster_nodes",
    "connect",
    "db1",
    "db_client",
    "nodes",
    "redis_nodes",
    "silent_server",
]
