"""This member's replica of the group's state: `state_machine` (`Replica`, the commit log's state
machine: the broker core, its effects on this node's sessions) and `bodies` (`BodyStore`: the
message bodies in the body journal, referred to by the core).
"""
