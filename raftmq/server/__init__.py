"""The node: asyncio STOMP listener, sessions, the commit-log seam and the effect dispatcher."""
