"""Loopback TCP ports for the tests' rings, claimed for the life of this process.

The twin of tests/free_port.hpp (read its comment for why): ports come from below the
kernel's ephemeral range, so no outgoing connection takes one while a rank is about to listen
on it, and each is locked (byte `port` of one shared file) so no other test process, C++ or
Python, hands out the same port while this one lives.
"""
import fcntl
import os
import socket
import threading

CLAIM_FILE = "/tmp/ringattn-test-ports.lock"
_lock = threading.Lock()
_mine = set()
_fd = None
_next = os.getpid() * 2654435761


def _range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    return (10000, lo) if lo > 12000 else (hi + 1, 65536)


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port():
    global _fd, _next
    with _lock:
        if _fd is None:
            _fd = os.open(CLAIM_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        lo, hi = _range()
        for _ in range(hi - lo):
            port = lo + _next % (hi - lo)
            _next += 1
            if port in _mine:
                continue
            try:
                fcntl.lockf(_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port, os.SEEK_SET)
            except OSError:
                continue  # another live test process has it
            if not _bindable(port):
                fcntl.lockf(_fd, fcntl.LOCK_UN, 1, port, os.SEEK_SET)
                continue
            _mine.add(port)
            return port
        raise RuntimeError(f"free_port: no claimable loopback port left in [{lo}, {hi})")


def free_ports(n):
    return [free_port() for _ in range(n)]


if __name__ == "__main__":  # for shell scripts: `python3 tests/python/ports.py N` prints N ports
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(" ".join(str(p) for p in free_ports(n)))
