"""The STOMP edge: one client socket to committed commands and back.

`connection` (the asyncio shell around a socket), `session` (the sans-I/O STOMP session: bytes
and time in, decisions out), `translate` (frames to core commands), `frames` (effects to
frames), `relay` (a follower piping a client to the leader). The BLOCK gate they consult is
`raftmq.server.seams.flow`.
"""
