"""What a failover client does on one connection only: ACK / NACK a message (on the
connection that delivered it) and run a transaction (on the connection that began it).

After a reconnect the broker has already redelivered those messages and rolled those
transactions back, so an ACK of an older delivery answers False and a COMMIT raises
`TransactionRolledBack`; nothing is ever acknowledged on a connection that did not deliver it.
"""

from __future__ import annotations

from collections.abc import Callable

from raftmq.client.failover_subscription import Delivery
from raftmq.client.stomp_client import StompClient
from raftmq.errors import ClientError, TransactionRolledBack
from raftmq.protocol.frame import Frame

Current = Callable[[], tuple[StompClient | None, int]]  # (the connection, its number)


class ConnectionBound:
    def __init__(self, current: Current) -> None:
        self._current = current
        self._transactions: dict[str, int] = {}  # id -> the connection it was begun on

    def client_for(self, frame: Frame) -> StompClient | None:
        """The connection to acknowledge `frame` on; None when the one that delivered it is gone."""
        client, connection = self._current()
        if isinstance(frame, Delivery) and frame.connection != connection:
            return None
        return client

    def acknowledge_nowait(self, kind: str, frame: Frame, transaction: str | None) -> bool:
        client = self.client_for(frame)
        if client is None:
            return False
        try:
            (client.ack_nowait if kind == "ack" else client.nack_nowait)(frame, transaction=transaction)
        except ClientError:
            return False
        return True

    async def acknowledge(self, kind: str, frame: Frame, receipt: bool, transaction: str | None) -> bool:
        client = self.client_for(frame)
        if client is None:
            return False
        method = client.ack_nowait if kind == "ack" else client.nack_nowait
        try:
            fut = method(frame, receipt=receipt, transaction=transaction)
        except ClientError:
            if client.is_closed:
                return False
            raise
        if fut is not None:
            await fut
        return True

    def begun(self, txid: str) -> None:
        self._transactions[txid] = self._current()[1]

    def check(self, txid: str) -> None:
        client, connection = self._current()
        if self._transactions.get(txid) != connection or client is None:
            raise TransactionRolledBack(f"transaction {txid!r} is not open on the current connection")

    def take(self, txid: str) -> StompClient:
        """The connection to end transaction `txid` on (it is forgotten here)."""
        self.check(txid)
        del self._transactions[txid]
        client = self._current()[0]
        assert client is not None
        return client

    def connection_lost(self) -> None:
        self._transactions.clear()
