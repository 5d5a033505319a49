"""Test helpers shared across the test packages: hand-written STOMP clients and node processes
(`stomp_raw`), real group members for fault tests (`group_harness`) and the model that checks
what they acknowledged (`group_model`), test certificates (`tls_certs`), the core's test
harness (`broker_harness`) and a scripted broker for client tests (`fake_broker`)."""
