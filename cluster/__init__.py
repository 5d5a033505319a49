"""The files that describe a deployment, read and checked: every error is a `ConfigError` naming
the file and the dotted key, so an operator can fix a file without reading our code.

- `group_file`: a group file (`[group]`, one `[[node]]` per member, the settings they share),
  the members file that takes the place of its `[[node]]` tables once membership changes, and
  `load_config`, which tells a group file from a single node's file (raftmq.config);
- `topology`: a topology file (`[topology]`, `[[group]]`), what `raftmq up` launches;
- `connection`, `network`, `discovery` (with `table`): its `[[cluster_connection]]`,
  `[[network_connector]]`, `[[broadcast_group]]` and `[[discovery_group]]` tables
  (docs/cluster.md), read into raftmq.routing's types, where the pure decisions the broker core
  and the bridges take with them are;
- `node_settings`: what one node takes from a topology file (its group's place in the cluster).

A single node's file, and the helpers these read with (`read_toml`, `build_dataclass`,
`split_address`), are raftmq.config: cluster may import raftmq.config and raftmq.routing, never
the reverse. No other module reads TOML (tests/test_architecture.py).
"""
