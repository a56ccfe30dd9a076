"""The workers' control channel for frameworks whose communication library has no small collective
the agent can call between steps (TensorFlow's collectives live inside compiled functions, MXNet's
parameter server only sums what workers push into keys the optimizer owns).

Rank 0 listens on MASTER_ADDR:MASTER_PORT; every other worker connects and says its rank. `agree`
ORs each decision over the workers and `gather` collects one value from each, both through rank 0
(a star: a few bytes per step). The messages are pickled, authenticated with the job's key
(multiprocessing.connection's HMAC handshake): only processes the launcher gave the key can join.
A worker that goes away ends the collective with an error that names it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

CONNECT_TIMEOUT_S = 120.0


class PeerLost(RuntimeError):
    """A worker of the job went away (died, or ended its part)."""


@dataclass
class Control:
    rank: int
    world_size: int
    address: tuple[str, int]
    key: bytes
    _peers: dict[int, Connection] = field(default_factory=dict)
    _root: Connection | None = None
    _listener: Listener | None = None

    def join(self) -> None:
        """Rank 0: accept every other worker; the others: connect to rank 0 (retrying while it starts)."""
        if self.rank == 0:
            self._listener = Listener(("0.0.0.0", self.address[1]), authkey=self.key)
            while len(self._peers) < self.world_size - 1:
                conn = self._listener.accept()
                self._peers[int(conn.recv())] = conn
            return
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            try:
                self._root = Client(self.address, authkey=self.key)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise PeerLost(
                        f"rank {self.rank} could not reach rank 0 at {self.address[0]}:{self.address[1]} "
                        f"within {CONNECT_TIMEOUT_S:.0f} s ({exc})"
                    ) from None
                time.sleep(0.2)
        self._root.send(self.rank)

    def _exchange(self, value: Any, combine: Any) -> Any:
        if self.rank == 0:
            values = [value]
            for rank in range(1, self.world_size):
                values.append(self._recv(self._peers[rank], rank))
            result = combine(values)
            for rank, conn in self._peers.items():
                try:
                    conn.send(result)
                except OSError:
                    raise PeerLost(f"worker rank {rank} went away") from None
            return result
        assert self._root is not None, "join() first"
        try:
            self._root.send(value)
        except OSError:
            raise PeerLost("worker rank 0 went away") from None
        return self._recv(self._root, 0)

    @staticmethod
    def _recv(conn: Connection, rank: int) -> Any:
        try:
            return conn.recv()
        except (EOFError, OSError):
            raise PeerLost(f"worker rank {rank} went away") from None

    def agree(self, flags: list[bool]) -> list[bool]:
        """Each decision true if any worker's is (as PyTorch's all_reduce MAX over the flags)."""
        return list(self._exchange([bool(f) for f in flags], lambda all_: [any(col) for col in zip(*all_)]))

    def gather(self, value: Any) -> list[Any]:
        """Every worker's value, in rank order, on every worker."""
        return list(self._exchange(value, list))

    def leave(self) -> None:
        for conn in [*self._peers.values(), *([self._root] if self._root is not None else [])]:
            conn.close()
        self._peers.clear()
        self._root = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
