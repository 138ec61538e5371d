"""The process that forks SQL workers (`service.sql_worker`) for a server: started once, it has imported what a
query needs (DuckDB, Arrow, sqlglot, DataSketches, SQLAlchemy: most of a second), so a worker costs a fork.

    server = ForkServer.shared()         # started on first use, again if it died
    pid, conn = server.fork(spill_dir)   # a worker reading its job from `conn`
    server.kill(pid)                     # SIGKILL, unless it has ended already

It is single-threaded (a fork copies one thread, so no lock is held in the child), a child of the server process
(it ends with it: an end of its control socket kills every worker and exits) and the only one that reaps its
workers. A kill goes through it, so it never reaches a process that took an ended worker's pid. When a worker has
ended it removes the worker's spill folder, which a worker killed mid-spill leaves behind.

    python -m ingest_core.service.sql_forkserver FD     # FD: its end of the control socket (SOCK_SEQPACKET)
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

from ingest_core.service import sql_worker
from ingest_core.query.errors import SqlError

READY, FORK, KILL = b"R", b"F", b"K"
PID = struct.Struct("!i")
REAP_EVERY_S = 0.1  # how often ended workers are looked for while any runs
START_TIMEOUT_S = 120.0


class ForkServerError(SqlError):
    """The fork server could not be started or asked (its process ended, or did not answer)."""

    code = "INGEST_SQL_WORKER_UNAVAILABLE"


class ForkServer:
    """The server side's handle on the fork server process: one per server process, shared by its threads."""

    _shared: "ForkServer | None" = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        self.ctl = ours
        self.ctl.settimeout(START_TIMEOUT_S)
        try:
            ready = self.ctl.recv(16)
        except OSError as exc:
            ready = f"({exc})".encode()
        if ready != READY:
            self.close()
            raise ForkServerError(f"the SQL fork server did not start (its process exited with "
                                  f"{self.proc.poll()}): see the server's log")
        self.ctl.settimeout(30)

    @classmethod
    def shared(cls) -> "ForkServer":
        """This process's fork server: started now if there is none, or it ended, or it is a forked parent's."""
        with cls._shared_lock:
            server = cls._shared
            if server is None or server.owner != os.getpid() or server.proc.poll() is not None:
                if server is not None and server.owner == os.getpid():
                    server.close()
                server = cls._shared = cls()
            return server

    def fork(self, spill_dir: str) -> tuple[int, Connection]:
        """A new worker: its pid and the connection to it."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.lock:
                socket.send_fds(self.ctl, [FORK + spill_dir.encode()], [theirs.fileno()])
                answer = self.ctl.recv(16)
        except OSError as exc:
            ours.close()
            raise ForkServerError(f"the SQL fork server did not answer: {exc}") from None
        finally:
            theirs.close()
        if len(answer) != PID.size or PID.unpack(answer)[0] <= 0:
            ours.close()
            raise ForkServerError("the SQL fork server could not fork a worker: see the server's log")
        return PID.unpack(answer)[0], Connection(ours.detach())

    def kill(self, pid: int) -> None:
        try:
            with self.lock:
                self.ctl.send(KILL + PID.pack(pid))
        except OSError:  # it has ended: so have its workers
            pass

    def close(self) -> None:
        self.ctl.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------------------------- the process


def serve(ctl: socket.socket) -> None:
    """Forks a worker per request, kills on request, reaps: until the control socket ends."""
    sql_worker.preload()
    workers: dict[int, str] = {}  # pid -> spill folder
    selector = selectors.DefaultSelector()
    selector.register(ctl, selectors.EVENT_READ)
    ctl.send(READY)
    while True:
        if selector.select(REAP_EVERY_S if workers else None):
            message, fds, _, _ = socket.recv_fds(ctl, 4096, 1)
            if not message:
                break
            if message[:1] == FORK:
                pid = _fork(ctl, fds[0], message[1:].decode())
                if pid > 0:
                    workers[pid] = message[1:].decode()
                ctl.send(PID.pack(pid))
            elif message[:1] == KILL and PID.unpack(message[1:])[0] in workers:
                os.kill(PID.unpack(message[1:])[0], signal.SIGKILL)
            for fd in fds[1:] if message[:1] == FORK else fds:
                os.close(fd)
        _reap(workers)
    for pid in workers:  # the server has gone: so do its queries
        os.kill(pid, signal.SIGKILL)
    for pid in list(workers):
        os.waitpid(pid, 0)
        _remove(workers.pop(pid))


def _fork(ctl: socket.socket, fd: int, spill_dir: str) -> int:
    try:
        pid = os.fork()
    except OSError as exc:
        print(f"sql_forkserver: fork failed: {exc}", file=sys.stderr, flush=True)
        os.close(fd)
        return -1
    if pid == 0:
        code = 1
        try:
            ctl.close()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            sql_worker.work(Connection(fd), spill_dir)
            code = 0
        finally:
            os._exit(code)  # never back into the fork server's loop
    os.close(fd)
    return pid


def _reap(workers: dict[int, str]) -> None:
    for pid in list(workers):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            _remove(workers.pop(pid))


def _remove(spill_dir: str) -> None:
    if spill_dir:
        shutil.rmtree(spill_dir, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl+C of the server's terminal: the server stops it
    serve(socket.socket(fileno=int(sys.argv[1])))
