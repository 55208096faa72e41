"""The listening TCP sockets of a process tree, read from ``/proc`` (Linux; no psutil needed).

:class:`ListenerWatch` samples, in a thread, every listening socket that the current process or any of its
descendants holds, while a run starts and ends its own processes (SuperLink, SuperNodes, Ray's GCS, raylet
and workers, ``flwr run``): a socket opened and closed between two samples can be missed, so the interval is
short and every process is read again at each sample.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import struct
import threading

LISTEN = "0A"
LOOPBACK = ("127.0.0.1", "::1")


def _children() -> dict:
    """``{ppid: [pid, …]}`` of every process visible in /proc."""
    kids: dict = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(root: int) -> list:
    """``root`` and all its descendants."""
    kids, out, stack = _children(), [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(kids.get(pid, []))
    return out


def _address(hexaddr: str, v6: bool) -> tuple:
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if v6:  # four little-endian 32-bit words
        raw = b"".join(struct.pack("<I", w) for w in struct.unpack(">4I", raw))
        addr = ipaddress.IPv6Address(raw)
        return (str(addr.ipv4_mapped) if addr.ipv4_mapped else str(addr)), int(port, 16)
    return socket.inet_ntoa(struct.pack("<I", int(ip, 16))), int(port, 16)


def _listening_inodes(pid: int) -> dict:
    """``{inode: (ip, port)}`` of the listening TCP sockets in ``pid``'s network namespace."""
    out = {}
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            cols = ln.split()
            if len(cols) > 9 and cols[3] == LISTEN:
                out[cols[9]] = _address(cols[1], v6)
    return out


def listeners(root: int | None = None) -> set:
    """``{(pid, command, ip, port)}``: every listening TCP socket held by ``root``'s process tree now."""
    root = os.getpid() if root is None else root
    table = _listening_inodes(root)
    found = set()
    for pid in tree(root):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inode = link[8:-1]
                if inode in table:
                    found.add((pid, comm, *table[inode]))
    return found


class ListenerWatch:
    """``with ListenerWatch() as w: …`` then ``w.seen`` (every listener sampled) and ``w.public()`` (those not on
    loopback)."""

    def __init__(self, interval_s: float = 0.25):
        self.interval_s = float(interval_s)
        self.seen: set = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            self.seen |= listeners()
            self.samples += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "ListenerWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def public(self) -> list:
        return sorted(x for x in self.seen if x[2] not in LOOPBACK)
