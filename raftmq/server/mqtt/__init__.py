"""The MQTT edge: a client's sans-I/O session (`session`) and its asyncio shell (`connection`)."""
