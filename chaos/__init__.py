"""Jepsen-style fault injection: client, generator, nemesis, checker, history. Arrives with the chaos issue."""
