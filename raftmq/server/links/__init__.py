"""The links between groups of a cluster, run on a group's leader: `bridge` (moving messages to a
neighbour group), `bridge_session` (the bridge's session in this node), `passive_link` (a
link another group drives), `discovery` (groups found by broadcast) and `cluster_events` (the
cluster's committed changes, logged).
"""
