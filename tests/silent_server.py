"""A server that accepts every connection and never answers: what a hung dependency looks like to its
clients (a stopped process whose socket still listens, a firewall that drops replies, a half-dead proxy)."""

import socket
import threading



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

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def __enter__(self) -> "SilentServer":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()
        with self.lock:
            for c in self.open:
                c.close()


def _closed(conn: socket.socket) -> bool:
    try:
        conn.setblocking(False)
        return conn.recv(1 << 16) == b""  # the client hung up (a request it sent is read and dropped)
    except BlockingIOError:
        return False
    except OSError:
        return True
