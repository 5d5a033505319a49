"""`raftmq bench`: a load generator and loss checker for any STOMP 1.2 broker."""
