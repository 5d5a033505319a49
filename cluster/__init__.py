"""Cluster connections as a topology file writes them: the `[[cluster_connection]]`,
`[[network_connector]]`, `[[broadcast_group]]` and `[[discovery_group]]` tables (docs/cluster.md),
each key checked and named in a `ConfigError`. What they build, and the pure decisions the
broker core and the bridges take with it, are in raftmq.routing.
"""
