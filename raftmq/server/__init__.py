"""The node: the asyncio STOMP listener and its connections, the sans-I/O STOMP session, the
replica that applies committed commands, and the admin port."""
