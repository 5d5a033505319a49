"""Operating a cluster: `raftmq up` / `down` / `status` (topology, node processes, status view)."""
