"""The host side of a forward (`warden forward`): a listener on the host's loopback, and a relay
of bytes between each connection it accepts and the one `dial` makes into a live sandbox.

Each accepted connection gets two threads, one each way, each with one chunk (64 KiB) in flight
at most, so a side that does not read holds the other back (TCP's own flow control) instead of
filling Warden's memory. An end of input one way is passed on as a half-close (`shutdown(SHUT_WR)`),
as HTTP clients and servers expect. At most `max_connections` are relayed at once; one more is
closed at once and counted refused. Stopping shuts every relayed socket down, which ends their
threads.

A loopback port is open to every account of the host. By default only connections made by the
account running the forward (and root) are relayed: the kernel's table of TCP sockets
(/proc/net/tcp, tcp6) names the owner of the connecting socket, found by its two ends, as an
identd would. Another account's connection is closed before it reaches the sandbox, and counted
refused (a line says so once for each account); so is one whose socket no process holds any
longer, whose owner the table no longer names. `admit=None` relays everyone's.

The socket is looked up by its two ends through the kernel's sock_diag netlink (as `ss` does),
one exact lookup; reading the text tables instead costs a line for every TCP socket of the host
(17 ms with 5,000 of them, 115 ms with 13,000, for each connection accepted). The tables remain
where that netlink is refused (some container runtimes filter it).
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import struct
import sys
import threading
from collections.abc import Callable, Collection

from warden.core.errors import Conflict, Denied, InvalidInput, WardenError
from warden.core.forwards import Connection, ForwardCounts

__all__ = ["PortRelay", "listen", "peer_uid"]

_CHUNK = 65536
_BACKLOG = 64


def listen(host: str, port: int) -> socket.socket:
    """A TCP listener on `host` (a loopback address) and `port` (0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a forward stopped just now leaves TIME_WAITs
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise Conflict(f"{host}:{port} is in use on this host: give another with --listen PORT "
                           "(--listen 0 picks a free one)") from None
        if exc.errno == errno.EACCES:
            raise Denied(f"cannot listen on port {port} of this host: a port below 1024 needs root; give "
                         "--listen PORT with a port above 1023 (--listen 0 picks a free one)",
                         rule="forward.listen") from None
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise InvalidInput(f"cannot listen on {host}: this host has no such address") from None
        raise
    return sock


def _proc_address(host: str, port: int) -> str:
    """`host:port` as /proc/net/tcp{,6} prints it: each 32-bit word of the address in host order,
    in hex, then the port."""
    packed = socket.inet_pton(socket.AF_INET6, host.split("%", 1)[0]) if ":" in host else socket.inet_aton(host)
    words = "".join(f"{int.from_bytes(packed[i:i + 4], sys.byteorder):08X}" for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def peer_uid(conn: socket.socket, table: str = "/proc/net") -> int | None:
    """The account that owns the other end of `conn`, a TCP connection on this host's loopback
    accepted by this process: its socket's row in the kernel's table (its local end is our
    peer, its remote end us). None when it is not found, or no process holds it any longer.
    `table`: where the text tables are read when sock_diag is refused (or, given, always)."""
    try:
        peer, ours = conn.getpeername(), conn.getsockname()
    except OSError:
        return None
    if table == "/proc/net":
        with contextlib.suppress(_NoDiag):
            return _diag_uid(conn.family, peer, ours)
    return _table_uid(conn, peer, ours, table)


# <linux/sock_diag.h>, <linux/inet_diag.h>, <linux/netlink.h>
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 1
_NO_COOKIE = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
# inet_diag_req_v2: family, protocol, extensions, pad, states; then its inet_diag_sockid: the
# ports and addresses in network order, then the interface and the cookie in the host's.
_REQUEST = struct.Struct("=BBBBI")
_SOCKID_ENDS = struct.Struct("!HH16s16s")
_SOCKID_REST = struct.Struct("=III")
_ANSWER = struct.Struct("=BBBB48sIIIII")  # inet_diag_msg: ..., its sockid, expires, queues, uid, inode
_ALL_STATES = 0xFFF


class _NoDiag(Exception):
    """sock_diag is not there to ask (or refused): the text tables are read instead."""


def _packed(family: int, host: str) -> bytes:
    if family == socket.AF_INET6:
        return socket.inet_pton(socket.AF_INET6, host.split("%", 1)[0])
    return socket.inet_aton(host) + bytes(12)


def _diag_uid(family: int, peer: tuple[str, int], ours: tuple[str, int]) -> int | None:
    """The peer's socket (its local end `peer`, its remote end `ours`) by one exact lookup."""
    request = (_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES)
               + _SOCKID_ENDS.pack(peer[1], ours[1], _packed(family, peer[0]), _packed(family, ours[0]))
               + _SOCKID_REST.pack(0, _NO_COOKIE, _NO_COOKIE))
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, _NETLINK_SOCK_DIAG)
    except OSError as exc:
        raise _NoDiag from exc
    with sock:
        try:
            sock.sendto(_HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
                        + request, (0, 0))
            sock.settimeout(1.0)
            answer, (sender, _groups) = sock.recvfrom(8192)
        except OSError as exc:
            raise _NoDiag from exc
    if len(answer) < _HEADER.size:
        raise _NoDiag
    _length, kind, _flags, sequence, _port = _HEADER.unpack_from(answer)
    if sender != 0 or sequence != 1:  # another process may write to this socket's port too; only the kernel is asked
        raise _NoDiag
    if kind == _NLMSG_ERROR:
        (error,) = struct.unpack_from("=i", answer, _HEADER.size)
        if -error == errno.ENOENT:  # no such socket: gone, or never this host's
            return None
        raise _NoDiag
    if kind != _SOCK_DIAG_BY_FAMILY or len(answer) < _HEADER.size + _ANSWER.size:
        raise _NoDiag
    _family, _state, _timer, _retrans, _id, _expires, _rqueue, _wqueue, uid, inode = _ANSWER.unpack_from(
        answer, _HEADER.size)
    # As in the tables: a socket its process has closed has no inode (its uid is not its owner's).
    return None if inode == 0 else uid


def _table_uid(conn: socket.socket, peer: tuple[str, int], ours: tuple[str, int], table: str) -> int | None:
    wanted = [(_proc_address(peer[0], peer[1]), _proc_address(ours[0], ours[1]))]
    if conn.family == socket.AF_INET:  # a client's IPv6 socket reaching 127.0.0.1 shows as ::ffff:127.0.0.1
        wanted.append((_proc_address("::ffff:" + peer[0], peer[1]), _proc_address("::ffff:" + ours[0], ours[1])))
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{table}/{name}", encoding="ascii", errors="replace") as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    if len(fields) > 9 and (fields[1], fields[2]) in wanted:
                        # A socket its process has closed (finishing its close, or in TIME_WAIT) is
                        # listed as uid 0 with inode 0: its owner is gone, not root. Another account
                        # that sent its bytes and closed before we looked was relayed as root.
                        if fields[9] == "0" or not fields[7].isdigit():
                            return None
                        return int(fields[7])
        except OSError:
            continue
    return None


class PortRelay:
    """Relays the connections `listener` accepts to those `dial` makes, counting them in `counts`;
    `note` is told, in one line, why a connection could not be relayed."""

    def __init__(self, listener: socket.socket, dial: Callable[[], Connection], *, max_connections: int,
                 counts: ForwardCounts, note: Callable[[str], None],
                 admit: Collection[int] | None = None) -> None:
        self._listener = listener
        self._admit = admit  # the accounts whose connections are relayed (None: any)
        self._told: set[int | None] = set()  # the other accounts whose refusal was noted once
        self._dial = dial
        self._max = max_connections
        self.counts = counts
        self._note = note
        self._lock = threading.Lock()
        self._open: set[Connection] = set()  # every socket of a connection being relayed
        self._active = 0
        self._stopped = False
        self._threads: list[threading.Thread] = []

    @property
    def active(self) -> int:
        with self._lock:
            return self._active

    def serve(self, ended: Callable[[], str | None], tick: float = 1.0) -> str:
        """Accept and relay until `ended` (asked every `tick` seconds) gives a reason, returned."""
        while True:
            why = ended()
            if why is not None:
                return why
            ready, _, _ = select.select([self._listener], [], [], tick)
            if ready:
                self._accept()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        if self._admit is not None:
            uid = peer_uid(client)
            if uid not in self._admit:
                with self._lock:
                    self.counts.connections += 1
                # One line for each account: another one connecting in a loop wrote a line each
                # time, without end, to the person's terminal (or log file).
                told = uid in self._told
                self._told.add(uid)
                who = "an unknown account" if uid is None else f"account {uid}"
                self._refuse(client, None if told else f"a connection from {who} was closed: only your own are "
                                                       "relayed (--any-user relays every account's); its next "
                                                       "ones are closed without a word")
                return
        with self._lock:
            self.counts.connections += 1
            full = self._active >= self._max
            if not full:
                self._active += 1
                self._open.add(client)
        if full:
            self._refuse(client, f"{self._max} connections are relayed already; this one was closed")
            return
        thread = threading.Thread(target=self._connection, args=(client,), daemon=True, name="forward")
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _refuse(self, client: socket.socket, why: str | None) -> None:
        with self._lock:
            self.counts.refused += 1
        with contextlib.suppress(OSError):
            client.close()
        if why is not None:
            self._note(why)

    def _connection(self, client: socket.socket) -> None:
        upstream: Connection | None = None
        try:
            try:
                upstream = self._dial()
            except WardenError as exc:
                self._refuse(client, exc.message)
                return
            with self._lock:
                if self._stopped:
                    return
                self._open.add(upstream)
                self.counts.relayed += 1
            back = threading.Thread(target=self._pump, args=(upstream, client, "bytes_out"), daemon=True,
                                    name="forward-back")
            back.start()
            self._pump(client, upstream, "bytes_in")
            back.join()
        finally:
            with self._lock:
                self._active -= 1
                self._open.discard(client)
                if upstream is not None:
                    self._open.discard(upstream)
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()

    def _pump(self, source: Connection, sink: Connection, counter: str) -> None:
        """`source`'s bytes to `sink` until its end (passed on as a half-close) or an error
        (either socket closed, reset or shut down: both are shut down, which ends the other way)."""
        try:
            while True:
                chunk = source.recv(_CHUNK)
                if not chunk:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(chunk)
                with self._lock:
                    setattr(self.counts, counter, getattr(self.counts, counter) + len(chunk))
        except OSError:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def stop(self, wait: float = 2.0) -> None:
        """Close the listener and end every relayed connection."""
        with self._lock:
            self._stopped = True
            relayed = list(self._open)
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in relayed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(wait / max(len(self._threads), 1))
