"""The admin port: `http` (`AdminServer`: /status, /metrics, /health, the console and the
management API on one HTTP listener), `management` (the API: queues, messages, connections,
membership), `metrics` (Prometheus) and `console/` (the web console's page, script and style).
"""
