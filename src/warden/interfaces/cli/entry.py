"""The `warden` program: a thin client of the home's daemon for `warden run`, else the CLI.

Most of a `warden run`'s time was Python importing Warden (the registry stack, the policy,
the sandbox adapters) before the command could start. The home's daemon
(interfaces/cli/daemon.py) has imported all that once; for each `warden run` it forks a child
that runs exactly the command line this process was given, with this process's environment,
folder, stdin, stdout and stderr (passed over the socket), and that child's status is this
process's. So this module imports the standard library only, and only what the round trip
needs.

It goes through the daemon only where the result is the same as running here: the `run`
command (not `--tty`, which needs this terminal as its controlling one), stdin not a terminal
(Ctrl-C at a prompt would stop the whole run instead of reaching the program), the daemon not
switched off (`WARDEN_DAEMON=0`), and a daemon of the same code and environment (else it says
so and the command runs here). Where there is no daemon yet, the command runs here and one is
started for the next.
"""

from __future__ import annotations

import _socket
import os
import struct
import sys
from time import monotonic as _monotonic

# Not `from typing import TYPE_CHECKING`: this module starts every `warden` program, and each
# import here is paid by every `warden run` (typing alone: 7 ms; json and contextlib too; the
# socket module 3 ms over the C module under it, which is all this needs; `signal` is imported
# once the request is on its way, while the daemon's child starts the command).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from socket import socket as Socket
    from typing import NoReturn

__all__ = ["MAX_FRAME", "daemon_paths", "decode_request", "encode_request", "home_of", "is_daemon_run", "main",
           "ours", "recv_frame", "reply", "send_frame", "trusted_home"]

MAX_FRAME = 1 << 20  # a request is a command line and an environment: far below this
_CONNECT_S = 2.0  # seconds to reach the daemon and hand it the request
_ANSWER_S = 10.0  # seconds for its child to say it runs the command, else it runs here
_MAGIC = b"warden-run/3"


def send_frame(sock: Socket | _socket.socket, payload: bytes, fds: Sequence[int] = ()) -> None:
    """One length-prefixed frame, with descriptors (SCM_RIGHTS) on its first byte."""
    data = struct.pack("!I", len(payload)) + payload
    if fds:
        rights = struct.pack(f"{len(fds)}i", *fds)
        sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        data = data[sent:]
    if data:
        sock.sendall(data)


def recv_frame(sock: Socket | _socket.socket, *, max_fds: int = 0, deadline: float | None = None,
               senders: list[int] | None = None, last_look: bool = False) -> tuple[bytes | None, list[int]]:
    """The next frame and the descriptors that came with it; (None, []) at a clean end.
    Raises ValueError for anything else (too long, cut short, too many descriptors), TimeoutError
    when `deadline` (time.monotonic()) passes first, for the whole frame. `senders`: gets the pid
    the kernel stamped on each piece (SCM_CREDENTIALS, on a socket with SO_PASSCRED).
    `last_look`: past the deadline, what the peer sent is read all the same; when it sent
    nothing, the socket's reading side is shut first, so that it can send nothing more (its send
    fails) and what it sent before is still read, then the end. A client stopped (or starved)
    while the daemon's child said its pid and started the command so never runs it again, and a
    child that says its pid after the client gave up runs nothing."""
    fds: list[int] = []
    head = b""
    late = False

    def in_time() -> None:
        nonlocal late
        if deadline is not None and not late:
            left = deadline - _monotonic()
            if left > 0:
                sock.settimeout(left)
                return
            if not last_look:
                raise TimeoutError("the frame did not come in time")
            late = True
            if not _queued(sock):
                sock.shutdown(_socket.SHUT_RD)
            sock.settimeout(None)  # a shut socket (or a frame already here) keeps no one waiting

    try:
        def piece(size: int) -> bytes:
            space = _socket.CMSG_SPACE(max_fds * 4) if max_fds and not fds else 0
            if senders is not None:
                space += _socket.CMSG_SPACE(12)
            # Close-on-exec, as every descriptor Warden opens: what came in a frame (a client's
            # connection, its streams, a report pipe) reaches no program a receiver starts.
            chunk, ancillary, flags, _ = sock.recvmsg(size, space, _socket.MSG_CMSG_CLOEXEC)
            for level, kind, data in ancillary:
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                    whole = len(data) - len(data) % 4
                    fds.extend(struct.unpack(f"{whole // 4}i", data[:whole]))
                elif level == _socket.SOL_SOCKET and kind == _socket.SCM_CREDENTIALS and senders is not None:
                    senders.append(struct.unpack("3i", data[:12])[0])
            if flags & _socket.MSG_CTRUNC:
                raise ValueError("more descriptors than a request carries")
            return chunk

        def next_piece(size: int, *, stamped: bool) -> bytes:
            while True:
                in_time()
                try:
                    return piece(size) if stamped else sock.recv(size)
                except TimeoutError:
                    if not last_look:
                        raise
                    # The socket's own timeout was the deadline: in_time() now takes the last look.

        while len(head) < 4:
            chunk = next_piece(4 - len(head), stamped=True)
            if not chunk:
                if head:
                    raise ValueError("the frame was cut short")
                return None, []
            head += chunk
        (size,) = struct.unpack("!I", head)
        if size > MAX_FRAME:
            raise ValueError(f"a frame of {size} bytes (at most {MAX_FRAME})")
        body = b""
        while len(body) < size:
            chunk = next_piece(min(size - len(body), 65536), stamped=senders is not None)
            if not chunk:
                raise ValueError("the frame was cut short")
            body += chunk
    except BaseException:
        for fd in fds:
            try:  # noqa: SIM105 - contextlib is one import more for every `warden` program
                os.close(fd)
            except OSError:
                pass
        raise
    return body, fds


def _queued(sock: Socket | _socket.socket) -> bool:
    """Whether the peer's bytes (or its end) wait to be read on `sock`, without waiting (the
    socket is left non-blocking)."""
    sock.setblocking(False)
    try:
        sock.recv(1, _socket.MSG_PEEK)
    except BlockingIOError:
        return False
    return True


def encode_request(argv: Sequence[str], env: dict[str, str], cwd: str) -> bytes:
    """A command line, its environment and folder as NUL-separated bytes (none holds a NUL;
    bytes that are not UTF-8 travel as they are, as the operating system gave them)."""
    fields = [_MAGIC, os.fsencode(cwd), str(len(argv)).encode(), *map(os.fsencode, argv),
              *(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items())]
    return b"\0".join(fields)


def decode_request(payload: bytes) -> tuple[list[str], dict[str, str], str]:
    """encode_request's inverse (argv, env, cwd); ValueError for anything it could not have made."""
    fields = payload.split(b"\0")
    if len(fields) < 3 or fields[0] != _MAGIC or not fields[2].isdigit():
        raise ValueError("not a request of this Warden's client")
    count = int(fields[2])
    if len(fields) < 3 + count:
        raise ValueError("a request cut short")
    env: dict[str, str] = {}
    for item in fields[3 + count:]:
        key, sep, value = item.partition(b"=")
        if not sep or not key:
            raise ValueError("a malformed environment entry")
        env[os.fsdecode(key)] = os.fsdecode(value)
    return [os.fsdecode(f) for f in fields[3:3 + count]], env, os.fsdecode(fields[1])


def reply(word: str, value: object) -> bytes:
    """One of the daemon's answers: `pid N`, `status N`, `fallback WHY`."""
    return f"{word} {value}".encode("utf-8", "replace")


def _answer(payload: bytes | None) -> tuple[str, str]:
    word, _, value = (payload or b"").decode("utf-8", "replace").partition(" ")
    return word, value


def _number(value: str, *, signed: bool = False) -> int | None:
    """An answer's VALUE as the daemon writes it: ASCII digits, a `-` first where `signed`, at
    most 18 (a pid, an exit status: far fewer; client.c reads no more); None for anything else,
    never an error (str.isdigit takes `²`, which int() refuses, and int() refuses 4,300 digits)."""
    digits = value[1:] if signed and value.startswith("-") else value
    if not 0 < len(digits) <= 18 or not digits.isascii() or not digits.isdigit():
        return None
    return int(value)


def daemon_paths(home: str) -> tuple[str, str]:
    """The daemon's socket and lock file in the home's `run` folder."""
    run = os.path.join(home, "run")
    return os.path.join(run, "daemon.sock"), os.path.join(run, "daemon.lock")


def home_of(argv: Sequence[str], environ: dict[str, str] | os._Environ[str]) -> str:
    """The home this command line names, as the CLI finds it (bootstrap.Home.locate)."""
    own = argv[: list(argv).index("--")] if "--" in argv else argv
    raw = environ.get("WARDEN_HOME") or "~/.warden"
    for index, word in enumerate(own):
        if word == "--home" and index + 1 < len(own):
            raw = own[index + 1]
        elif word.startswith("--home="):
            raw = word.split("=", 1)[1]
    if (raw == "~" or raw.startswith("~/")) and environ.get("HOME"):
        raw = os.path.join(environ["HOME"], raw[2:])
    return os.path.abspath(os.path.expanduser(raw))


def is_daemon_run(argv: Sequence[str]) -> bool:
    """Whether the command line is one the daemon runs: `run`, without a terminal or help."""
    own = list(argv[: list(argv).index("--")] if "--" in argv else argv)
    words = [w for i, w in enumerate(own) if not w.startswith("-") and (i == 0 or own[i - 1] != "--home")]
    return bool(words) and words[0] == "run" and not any(w in ("--tty", "-t", "--help", "-h") for w in own)


def _wanted(argv: Sequence[str]) -> bool:
    """Whether this command line may go through the daemon (see the module's docstring)."""
    if os.environ.get("WARDEN_DAEMON", "1") in ("0", "off", "no", "false") or not is_daemon_run(argv):
        return False
    try:
        return not os.isatty(0)
    except OSError:
        return False


def _through_daemon(argv: Sequence[str], home: str) -> int | None:
    """The command's status, run by the daemon's child; None: run it here (and, when no daemon
    answered, one is started for the next command)."""
    path, _ = daemon_paths(home)
    if not trusted_home(home):
        return None  # a home of another user's (or open to others): no daemon of ours serves it
    if os.path.lexists(os.path.dirname(path)) and not ours(os.path.dirname(path), private=True):
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(_CONNECT_S)
        sock.connect(path)
    except OSError:
        sock.close()
        _start_daemon(home)
        return None
    try:
        # The peer is a process of this user's (a socket another made in our folder is not ours).
        peer, uid, _ = struct.unpack("3i", sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12))
        if uid != os.geteuid():
            return None
        return _served(sock, argv, peer)
    finally:
        sock.close()


def trusted_home(home: str) -> bool:
    """Whether `home` is a folder that check_owned takes (adapters/owned.py's home_problem: of
    this user's, on a path only they and root may change; through a link to it, group-writable
    by their private group): the home a daemon may serve, as client.c's trusted_home decides."""
    from pathlib import Path

    from warden.adapters.owned import home_problem

    return os.path.isdir(home) and home_problem(Path(home)) is None


def ours(path: str, *, private: bool) -> bool:
    """Whether `path` is a real folder of this user's that no other may write to (`private`: nor
    read or enter)."""
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return False
    loose = 0o077 if private else 0o022
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & loose


def _child_of(pid: int, parent: int) -> bool:
    """Whether process `pid` is a child of `parent` (the daemon's child it names as the one
    running the command): only then are signals passed on to it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read(4096).rsplit(b")", 1)[1].split()
        return int(fields[1]) == parent
    except (OSError, IndexError, ValueError):
        return False


def _served(sock: _socket.socket, argv: Sequence[str], peer: int) -> int | None:
    """The round trip on a connected socket: the request, the child's pid, its status."""
    try:
        # Proof that this process may write in the home (a Landlock ruleset or a read-only
        # mount around it would refuse the open): the daemon serves no one with less.
        proof = os.open(daemon_paths(home_of(argv, os.environ))[1], os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        me = os.pidfd_open(os.getpid())  # the daemon judges this very process, not one that may take its pid
    except OSError:
        os.close(proof)
        return None
    try:
        environ = dict(os.environ)
        if not environ.get("WARDEN_TERMINAL"):  # the daemon's own session is not this terminal's
            from warden.adapters.terminal_id import session_terminal

            environ["WARDEN_TERMINAL"] = session_terminal()
        send_frame(sock, encode_request(argv, environ, os.getcwd()), (0, 1, 2, proof, me))
        # Nothing has started before the pid comes: past this wait the command runs here (the
        # daemon's child then cannot say its pid and runs nothing).
        word, value = _answer(recv_frame(sock, deadline=_monotonic() + _ANSWER_S, last_look=True)[0])
    except (OSError, ValueError):
        return None
    finally:
        os.close(proof)
        os.close(me)
    sock.settimeout(None)
    child = _number(value) if word == "pid" else None
    if child is None:
        return None  # a stale daemon (other code, another environment): it says why in its log
    verified = _child_of(child, peer)
    # The C module under `signal`: the same calls and numbers without its enums (`enum` is 5 ms).
    if TYPE_CHECKING:
        import signal
    else:
        import _signal as signal

    # Signals a person or a supervisor sends to stop a command: passed on to the daemon's child.
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    received: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        received.append(sig)
        if not verified:
            return
        try:  # noqa: SIM105 - as above
            os.kill(child, sig)
        except OSError:
            pass

    for sig in forwarded:
        signal.signal(sig, forward)
    while True:
        try:
            word, value = _answer(recv_frame(sock)[0])
        except (OSError, ValueError):
            word, value = "", ""
        status = _number(value, signed=True) if word == "status" else None
        if status is not None:
            # Killed by a signal it passed on (SIGTERM, SIGHUP, SIGQUIT; SIGINT is Warden's
            # "interrupted", 130): this process ends by it too, as one running the command
            # itself would, so its parent sees the same death.
            for got in received:
                if got != signal.SIGINT and status == 128 + got:
                    signal.signal(got, signal.SIG_DFL)
                    os.kill(os.getpid(), got)
            return status
        if word != "pid":
            sys.stderr.write("warden: the daemon's runner ended without the command's status\n")
            return 1


def _start_daemon(home: str) -> None:
    """Start the home's daemon in the background (once: its lock keeps a second one out)."""
    if not os.path.isdir(home):
        return  # not a home yet (`warden init` makes it): the command says what is wrong
    import subprocess

    try:  # noqa: SIM105 - as above
        # -P: no folder put before the standard library and Warden on the import path (`-m`
        # would put the current one there: a bot's `selectors.py` in the workspace would load
        # in the daemon); and it starts in `/`.
        subprocess.Popen(
            [sys.executable, "-P", "-m", "warden.interfaces.cli.daemon", home], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True, cwd="/")
    except OSError:
        pass  # the command runs here all the same


def _standard_streams() -> None:
    """A closed stdin, stdout or stderr (`warden run … >&-`) becomes /dev/null, as for a
    daemon: Python leaves its stream None, and nothing Warden writes may then fail."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 - the process's own stream


def main() -> NoReturn:
    _standard_streams()
    try:
        # Ctrl-C: the native client holds it across its exec of Python (client.c), let in here,
        # where one that came meanwhile is taken as below. Until main.run() handles it itself
        # (the CLI's modules loaded) nothing has run: it was a traceback.
        _let_interrupts_in()
        argv = sys.argv[1:]
        if argv == ["--version"]:  # answered before the CLI's modules load (argparse, json, typing)
            from warden._version import __version__

            sys.stdout.write(f"warden {__version__}\n")
            sys.stdout.flush()
            os._exit(0)
        if _wanted(argv):
            status = _through_daemon(argv, home_of(argv, os.environ))
            if status is not None:
                # Nothing of this process is left to tidy: ending at once spares the interpreter's
                # shutdown (a few milliseconds of every `warden run`).
                for stream in (sys.stdout, sys.stderr):
                    if stream is not None:
                        stream.flush()
                os._exit(status & 0xFF)
        from warden.interfaces.cli.main import run
    except KeyboardInterrupt:
        sys.stderr.write("warden: interrupted\n")
        sys.stderr.flush()
        os._exit(130)
    run()


def _let_interrupts_in() -> None:
    """Unblock SIGINT (the C module under `signal`, as in _through_daemon: `enum` is 5 ms)."""
    if TYPE_CHECKING:
        import signal
    else:
        import _signal as signal
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT,))
