"""Cluster connections' decisions: how Raft groups (each one logical broker) interconnect.

Pure decisions only (docs/cluster.md): `addresses` (which destinations a connection covers),
`connection` (a connection's settings and the links between groups), `discovery` (groups found
at run time: the settings, the announcement's wire form), `bindings` (what each group learns
of the others, hop by hop), `balance` (where a SEND to a queue goes), `route` (the headers a
forwarded message carries). The broker core applies them as committed state
(raftmq.core.cluster_routing); the node's bridges move the messages (raftmq.server.links.bridge); the
`cluster` package reads them from topology files.
"""
