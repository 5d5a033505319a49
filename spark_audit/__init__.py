"""`raftmq audit`: a PySpark consistency audit of what every node stored, next to what clients
saw (docs/audit.md). Readers (`sources`, `replay`, `segments`, `tables`), the checks as pure
DataFrame transforms (`derive`, `checks`), the job (`job`) and its report (`report`, `cli`),
and the synthetic run generator (`synth`, `member_files`)."""
