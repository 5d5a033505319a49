"""Cluster connections: how Raft groups (each one logical broker) interconnect.

Pure decisions only (docs/cluster.md): `addresses` (which destinations a connection covers),
`connection` (the `[[cluster_connection]]` settings and the links between groups), `bindings`
(what each group learns of the others, hop by hop), `balance` (where a SEND to a queue goes),
`route` (the headers a forwarded message carries). The broker core applies them as committed
state (raftmq.core.federation); the node's bridges move the messages (raftmq.server.bridge).
"""
