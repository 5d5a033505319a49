"""STOMP 1.0/1.1/1.2 wire protocol, sans-I/O: bytes in, frames out; frames in, bytes out. MQTT's is
in `raftmq.protocol.mqtt`, in the same style."""
