"""A broker that accepts connections and never answers costs a status read one deadline, however many datasources
wait on it, not one timeout after another per datasource."""

import socket
import threading

from helpers import SIMPLE, spec_from, sqlite_store

from ingest_core.service.status import collect_statuses


class SilentServer:
    """Accepts every connection, reads nothing, answers nothing; counts connections open at once."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.open: set[socket.socket] = set()
        self.most_at_once = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.open = {c for c in self.open if not _closed(c)} | {conn}
                self.most_at_once = max(self.most_at_once, len(self.open))

    def close(self) -> None:
        self.sock.close()
        for c in self.open:
            c.close()


def _closed(conn: socket.socket) -> bool:
    conn.setblocking(False)
    try:
        return conn.recv(1 << 16) == b""  # the client hung up (a request it sent is read and dropped)
    except BlockingIOError:
        return False
    except OSError:
        return True


NAMES = ["a", "b", "c", "d"]


def test_datasources_on_the_same_silent_broker_wait_for_it_together(tmp_path):
    server = SilentServer()
    store = sqlite_store(tmp_path)
    specs = {}
    for name in NAMES:
        specs[name] = spec_from(server.address, f"topic-{name}", SIMPLE, datasource=name)
        store.datasources.register_spec(name, specs[name].to_raw(), specs[name].fingerprint())
    try:
        reports = collect_statuses(store, NAMES, specs, kafka_timeout_s=2.0)
    finally:
        server.close()
    assert [r.datasource for r in reports] == NAMES
    for r in reports:  # each says why its lag is unknown, with the broker and the deadline
        [error] = [e for e in r.recent_errors if e.error_class == "BrokerUnavailableError"]
        assert r.latest is None and server.address in error.message and "2s" in error.message, error
    # they waited at once: all their connections were open at the same time (one after another: two at most, the
    # one closing and the next)
    assert server.most_at_once >= len(NAMES)
