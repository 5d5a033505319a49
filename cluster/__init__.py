"""Cluster connections between groups (bridges, topology, load balancing). Arrives with the clustering issue."""
