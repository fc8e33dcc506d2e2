"""`warden ps|logs|kill|wait`: background processes in a workspace's live sandboxes, and
`warden run --detach` (cmd_run hands it here) that starts one."""

from __future__ import annotations

import argparse
import codecs
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from warden.core.echo import ESCAPES
from warden.core.errors import InvalidInput, Locked, NotFound, Refused, Unavailable
from warden.interfaces.cli.main import Context, add_workspace
from warden.interfaces.cli.output import Output, printable, table

if TYPE_CHECKING:
    from warden.core.live import ProcessView
    from warden.services.runs import RunRequest

__all__ = ["register", "start_detached"]

# `warden wait` without --timeout waits as long as a process may run at most (sandbox.timeout's cap).
_FOREVER = 86400.0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ps", parents=[common], help="background processes in a workspace's live sandboxes",
                       description="Background processes in a workspace's live sandboxes. CPU: what a running one "
                                   "has used so far (its cgroup's count, else its leader's and the children it "
                                   "reaped); --json gives it as usage (docs/usage.md). An ended one's is in the "
                                   "audit's run event.")
    add_workspace(p)
    p.set_defaults(handler=_ps)
    p = sub.add_parser("logs", parents=[common], help="what a background process printed")
    p.add_argument("name")
    p.add_argument("id", help=_ID_HELP)
    p.add_argument("--follow", "-f", action="store_true", help="go on printing its output as it comes, until it ends")
    p.set_defaults(handler=_logs)
    p = sub.add_parser("kill", parents=[common], help="send a signal to a background process (and its children)")
    p.add_argument("name")
    p.add_argument("id", help=_ID_HELP)
    p.add_argument("--signal", "-s", default="TERM", help="TERM (default), KILL, INT, HUP, USR1, USR2, STOP, CONT")
    p.set_defaults(handler=_kill)
    p = sub.add_parser("wait", parents=[common], help="wait for a background process to end; exit with its status")
    p.add_argument("name")
    p.add_argument("id", help=_ID_HELP)
    p.add_argument("--timeout", help="give up after this long (seconds, or 30s, 10m); exits 1 then")
    p.set_defaults(handler=_wait)


_ID_HELP = ("the process id `warden run --detach` printed (see `warden ps`), or its start as long as no other "
            "process's begins so (as docker takes a container's)")


def _render(data: Any) -> str:
    rows = [(p["id"], "timed out" if p.get("timed_out") else p["status"],
             "" if p["exit_code"] is None else p["exit_code"], _cpu(p.get("usage")),
             p["started_at"][:19], p.get("by", ""), " ".join(p["cmd"])) for p in data]
    if not rows:
        return "no background processes"
    why = [f"{p['id']} was {p['status']}: {p['stopped_by']}" for p in data if p.get("stopped_by")]
    return "\n".join([table(("ID", "STATUS", "EXIT", "CPU", "STARTED", "BY", "COMMAND"), rows), *why])


def _by(principal: str) -> str:
    """Whose process, in the words `warden forward --as` takes: `you`, or `bot NAME`."""
    if principal == "user":
        return "you"
    return "bot " + principal.removeprefix("bot:").partition("@")[0]


def _cpu(used: Any) -> str:
    """A running process's CPU so far (`1.25s`); blank when ended or not measured."""
    cpu = used.get("cpu_s") if isinstance(used, dict) else None
    return f"{cpu:.2f}s" if isinstance(cpu, int | float) else ""


def _known(ctx: Context, name: str) -> None:
    """NotFound (exit 4) for a workspace that does not exist."""
    ctx.app.workspaces.get(name)


def start_detached(ctx: Context, request: RunRequest, *, tty: bool = False) -> Output:
    """`warden run NAME --detach -- CMD`: start it, print its id."""
    if tty:
        # A usage error (2), not a refusal to start (126): the command line itself is wrong.
        raise InvalidInput("--detach and --tty do not go together: a background process has no terminal")
    import dataclasses

    request = dataclasses.replace(request, stdin=None)  # a background process reads nothing
    try:
        runs = ctx.app.runs
    except (Locked, NotFound, Unavailable) as exc:
        raise Refused.of(exc) from None
    view = runs.start(request)
    if sys.stderr.isatty():
        # stdout stays the id alone (scripts take it); a person at a terminal is told what it is.
        import shlex

        name = shlex.quote(request.workspace)
        ctx.note(f"started in the background in {printable(request.workspace)}'s live sandbox: "
                 f"`warden logs {name} {view.id} --follow`, `warden kill {name} {view.id}`, `warden ps {name}`")
    return Output(view.to_json(), text=view.id)


def _ps(ctx: Context, args: argparse.Namespace) -> Output:
    _known(ctx, args.name)
    views = ctx.app.live.list(args.name)
    # Whose: the person sees every principal's processes, a bot's dev server beside their own.
    return Output([{**v.to_json(), "by": _by(v.principal)} for v in views], render=_render)


def _logs(ctx: Context, args: argparse.Namespace) -> Output:
    _known(ctx, args.name)
    live = ctx.app.live
    args.id = live.resolve(args.name, args.id)  # the whole id, in --json and for why it did not start
    bots = not ctx.json and live.get(args.name, args.id).principal != "user"
    out_to, err_to = _shown(sys.stdout, escaped=bots), _shown(sys.stderr, escaped=bots)
    if not args.follow:
        logs = live.logs(args.name, args.id)
        if ctx.json:
            return Output({"id": args.id, **logs.to_json()})
        out_to(logs.stdout)
        err_to(logs.stderr)
        _why_not_started(ctx, args)
        return Output(streamed=True)
    out, err = bytearray(), bytearray()
    ended = None
    for chunk in live.follow(args.name, args.id):
        if chunk is None:
            continue
        if chunk.exited is not None:
            ended = chunk.exited
            break
        if ctx.json:
            (out if chunk.stream == "stdout" else err).extend(chunk.data)
        else:
            (out_to if chunk.stream == "stdout" else err_to)(chunk.data)
    data = {"id": args.id, "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace"),
            "exit_code": ended.exit_code if ended else None}
    if not ctx.json and ended is not None:
        _why_not_started(ctx, args)
    return Output(data, streamed=not ctx.json)


def _why_not_started(ctx: Context, args: argparse.Namespace) -> None:
    """Warden's line on stderr for a process whose program could not be started (its own stderr
    says only `bwrap: execvp NAME: ...`) or that its timeout killed, as `warden run` in the
    foreground says it."""
    line = ctx.app.live.why_not_started(args.name, args.id)
    if line is not None:
        sys.stderr.write(line + "\n")


def _write(stream: Any, data: bytes) -> None:
    if data:
        stream.write(data)
        stream.flush()


# What a bot's process printed is the bot's choice of bytes: shown as they are on the person's
# terminal, an OSC 52 set their clipboard (a command to paste), a title or `\x1b[2K\r` forged
# lines. On a terminal they are shown with every control escaped but line breaks and tabs (as
# core/echo.py does for Warden's own text); through a pipe or into a file, byte for byte.
_KEEP = {ord("\n"), ord("\t")}
_BOT_ESCAPES = {c: v for c, v in ESCAPES.items() if c not in _KEEP}


def _shown(stream: TextIO, *, escaped: bool) -> Callable[[bytes], None]:
    """How a process's output is written to `stream` (stdout or stderr): byte for byte, or, when
    `escaped` (a bot's process) and `stream` is a terminal, decoded and escaped."""
    raw = stream.buffer
    if not escaped or not stream.isatty():
        return lambda data: _write(raw, data)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character may span two chunks

    def write(data: bytes) -> None:
        _write(raw, decoder.decode(data).translate(_BOT_ESCAPES).encode("utf-8"))

    return write


def _kill(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.live import signal_number

    sig = signal_number(args.signal)
    _known(ctx, args.name)
    view = ctx.app.live.kill(args.name, args.id, sig, actor="user")
    return Output(view.to_json(), text=_line(view))


def _line(view: ProcessView) -> str:
    code = "" if view.exit_code is None else f" (exit {view.exit_code})"
    why = f": {view.stopped_by}" if view.stopped_by else ""
    return f"{view.id} {view.status}{code}{why}"


def _wait(ctx: Context, args: argparse.Namespace) -> Output:
    timeout = _FOREVER
    if args.timeout is not None:
        from warden.core.durations import parse_timeout

        timeout = parse_timeout(args.timeout)
    _known(ctx, args.name)
    args.id = ctx.app.live.resolve(args.name, args.id)  # the whole id, for why it did not start
    view = ctx.app.live.wait(args.name, args.id, timeout)
    code = view.exit_code if view.exit_code is not None else 1  # lost: its status is not known
    if not ctx.json and (code in (126, 127) or view.timed_out):
        _why_not_started(ctx, args)
    return Output(view.to_json(), text=_line(view), exit_code=code)
