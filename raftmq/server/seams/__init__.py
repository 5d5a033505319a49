"""What the node's rooms share and meet through, below all of them: `host` (every host
protocol: what each part needs from the node), `flow` (the BLOCK gate of producer flow control)
and `leader_task` (the base of work that runs on the group's leader only). Nothing here imports
a room, so the rooms import each other one way only (docs/architecture.md).
"""
