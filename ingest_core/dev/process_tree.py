"""A process and everything it started, as /proc shows them: what the tests and benchmarks that watch a server
(its SQL workers, its CPU) read. Development tooling only.

    sql_worker_pids(pid)   # the SQL workers of a server (`service.sql_forkserver`'s children)
    cpu_seconds(pid)       # CPU time of the process and its descendants, those that ended and were reaped included
"""

from __future__ import annotations

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name (field 3 on: state, ppid, ...); [] if it has ended."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int) -> float:
    """The CPU time of a process and its descendants: each one's own (utime, stime) and that of its children that
    ended and were reaped (cutime, cstime), so that the total never falls when a child ends."""
    total = 0
    for proc in (pid, *descendants(pid)):
        fields = _stat(proc)
        if fields:
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime: fields 14-17
    return total / CLOCK_TICKS


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().decode(errors="replace")
    except OSError:
        return ""


def sql_worker_pids(server_pid: int) -> list[int]:
    """The SQL workers of a server process now: the children of its fork server (`service.sql_forkserver`, a child
    of the server's)."""
    workers = []
    for child in descendants(server_pid):
        fields = _stat(child)
        if fields and int(fields[1]) == server_pid and "sql_forkserver" in _command(child):
            workers += [pid for pid in descendants(child) if _stat(pid) and int(_stat(pid)[1]) == child]
    return workers
