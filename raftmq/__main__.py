from raftmq.cli import main

main()
