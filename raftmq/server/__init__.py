"""The node: one member of a group serving clients. Five rooms, each a subpackage, and the node's
wiring at the top (docs/architecture.md, "The server's rooms"):

- `seams/`: what the rooms share, below all of them (host protocols, the BLOCK gate, leader tasks);
- `stomp/`: the STOMP edge (connection shell, sans-I/O session, translation, frames, relay);
- `replica/`: the commit log's state machine and the body journal behind it;
- `links/`: the cluster's links between groups (bridges, discovery, cluster events);
- `admin/`: the admin port (HTTP server, management API, metrics, web console);
- the wiring: `node` (`Node`, which composes them), `succession` (leader changes and leader
  services), `ticker` (time into the core) and `rates`.
"""
