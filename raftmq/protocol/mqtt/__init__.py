"""MQTT 3.1.1 and 5.0 wire protocol, sans-I/O: bytes in, packets out; packets in, bytes out."""
