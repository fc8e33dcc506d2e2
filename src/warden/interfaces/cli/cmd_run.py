"""`warden run NAME [options] -- COMMAND...`: run a command in the workspace's sandbox."""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from warden.core.errors import InvalidInput, Locked, NotFound, Refused, Unavailable, WardenError
from warden.interfaces.cli.main import Context, add_workspace
from warden.interfaces.cli.output import Output

if TYPE_CHECKING:
    from warden.core.runs import RunResult
    from warden.services.runs import RunRequest


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    for word in ("run", "with"):
        if word == "run":
            p = sub.add_parser("run", parents=[common], help="run a command in a workspace's sandbox",
                               usage="warden run [NAME | -w NAME] [options] -- COMMAND [ARG...]",
                               epilog="Without NAME: this terminal's current workspace (`warden ws set NAME`). "
                                      "Without a terminal on stdin it goes through the home's daemon (started "
                                      "by the first run; ends after WARDEN_DAEMON_IDLE seconds idle): the same "
                                      "run, without loading Warden each time. WARDEN_DAEMON=0 runs it in this "
                                      "process.")
            add_workspace(p)
        else:
            p = sub.add_parser("with", parents=[common],
                               help="run a command in another workspace, leaving this terminal's current one",
                               usage="warden with NAME [options] -- COMMAND [ARG...]")
            p.add_argument("name")
        _run_options(p)
        # Everything after `--` is the command, its own dashes included (main._parse).
        p.add_argument("command", nargs="*", help="the command, after --")
        p.set_defaults(handler=_run, takes_command=True)


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", help="wall-clock limit in seconds (or 30s, 10m)")
    p.add_argument("--memory", help="memory limit, e.g. 256M, 2G")
    p.add_argument("--cpu", type=int, help="CPU-time limit in seconds")
    p.add_argument("--pids", type=int, help="maximum number of processes")
    p.add_argument("--net", choices=["none", "allow"], help="network: none (default) or allow")
    p.add_argument("--allow-domain", action="append", default=[], metavar="DOMAIN",
                   help="a reachable domain with --net allow (repeat; *.example.com for subdomains)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="set a variable inside the sandbox (repeat)")
    p.add_argument("--session", help="apply this session's path lists too")
    p.add_argument("--cwd", metavar="DIR",
                   help="working folder: relative to the workspace, or absolute inside it (default: its root)")
    p.add_argument("--tty", action="store_true",
                   help="give the command a terminal (a REPL, an editor): keys, Ctrl-C and resizes reach it; "
                        "its output is not captured")
    p.add_argument("--detach", action="store_true",
                   help="start it in the background, in the workspace's live sandbox; print its process id "
                        "and return at once (`warden ps|logs|kill|wait` follow it)")
    p.add_argument("--usage", action="store_true",
                   help="after the command, say on stderr the CPU time and peak memory it used, and how they were "
                        "measured (with --json, also as data.usage: cpu_s, memory_peak_bytes, memory_measured, "
                        "measured_by); the audit's `run` event keeps it in any case")
    p.add_argument("--as-token-env", action="store_true",
                   help="run as the bot whose grant token is in $WARDEN_TOKEN (needs execute; "
                        "the secrets its grant names are injected)")


def _timeout(text: str | None) -> float | None:
    if text is None:
        return None
    from warden.core.durations import parse_timeout

    return parse_timeout(text)


def _env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"bad --env {pair!r}: write KEY=VALUE")
        env[key] = value
    return env


def _writer(stream: Any) -> Any:
    def write(chunk: bytes) -> None:
        stream.write(chunk)
        stream.flush()
    return write


def _long_command(ctx: Context) -> AbstractContextManager[None]:
    """A run is an instance of its node once it has run one heartbeat interval, so its death
    unseen (killed, its machine gone) releases its leases and marks it lost; a shorter one pays no
    registry write. Not its terminal's lock: the terminal outlives a command killed in it."""
    instances = ctx.app.instances
    return instances.registered_after(instances.settings.interval, "command")


def _run(ctx: Context, args: argparse.Namespace) -> Output:
    command = list(args.command)
    if not command:
        raise InvalidInput("no command given: warden run NAME [options] -- COMMAND [ARG...]")
    live = not ctx.json
    # Standard input passes through as it is (a terminal, a file or a pipe).
    stdin = sys.stdin.fileno() if sys.stdin is not None and not sys.stdin.closed else None
    env, actor, timeout = _env(args.env), "user", _timeout(args.timeout)
    net, grant_domains = args.net, None
    if args.as_token_env:
        try:
            actor, secrets, domains = ctx.app.auth.run_as_token(ctx.environ.get("WARDEN_TOKEN"), args.name)
        except WardenError as exc:
            raise Refused.of(exc) from None  # the command never started: `warden run` exits 126
        env.update(secrets)  # a grant's secrets win over --env of the same name
        # The bot's network, as over HTTP: what its grant allows and this run names, never the
        # person's settings (network.allowed_domains); none unless it names some.
        grant_domains = domains
        net = net or ("allow" if args.allow_domain else "none")
    from warden.services.runs import RunRequest

    request = RunRequest(args.name, command, timeout=timeout, memory=args.memory, cpu=args.cpu, pids=args.pids,
                         net=net, allow_domains=args.allow_domain, env=env, stdin=stdin,
                         session=args.session, actor=actor, cwd=args.cwd, grant_domains=grant_domains)
    if args.detach:
        from warden.interfaces.cli.cmd_process import start_detached

        return start_detached(ctx, request, tty=args.tty)
    if args.tty:
        from warden.adapters.sandbox.runner import adopt_orphans
        from warden.interfaces.cli.terminal import run_on_terminal

        adopt_orphans()
        with _long_command(ctx):
            result = run_on_terminal(ctx, request)
        return _ended(result, args, streamed=True)
    return _ended(execute(ctx, request), args, streamed=live)


def execute(ctx: Context, request: RunRequest) -> RunResult:
    """`request` run with this process's standard streams: its output as it comes (all of it in
    the result instead with --json), a timed-out run's line on stderr."""
    from warden.adapters.sandbox.runner import adopt_orphans
    from warden.services.runs import RunOutput

    # This process lives for this one command: it may inherit the sandbox's pid 1 when bwrap
    # exits, and wait4 it for what the command used where no cgroup measures it.
    adopt_orphans()
    live = not ctx.json
    output = RunOutput(on_stdout=_writer(sys.stdout.buffer) if live else None,
                       on_stderr=_writer(sys.stderr.buffer) if live else None, capture=not live,
                       # Warden's own reports (network refusals) go to stderr in both modes.
                       on_notice=_writer(sys.stderr.buffer))
    try:
        runs = ctx.app.runs  # opens the registry: a locked or lost one refuses the run as well
    except (Locked, NotFound, Unavailable) as exc:
        raise Refused.of(exc) from None
    with _long_command(ctx):
        result = runs.execute(request, output)
    if live and result.timed_out:
        from warden.interfaces.cli.terminal import timed_out_line

        sys.stderr.write(timed_out_line(ctx, request) + "\n")
    return result


def _ended(result: RunResult, args: argparse.Namespace, *, streamed: bool) -> Output:
    """The run's answer: its six fields, and with --usage what it used (data.usage, a line on
    stderr). Only on request: `warden run --json`'s data is exactly six fields otherwise."""
    data = result.to_json()
    if args.usage:  # on stderr: with --json too, stdout stays the one document
        sys.stderr.write(_usage_line(result) + "\n")
        data["usage"] = result.usage.to_json() if result.usage is not None else None
    return Output(data, exit_code=result.exit_code, streamed=streamed)


def _usage_line(result: RunResult) -> str:
    """`warden: used 0.23 s of CPU and 203.6 MiB of memory at its peak (the whole run, by its cgroup)`."""
    used = result.usage
    if used is None:
        return "warden: what the command used was not measured here (no cgroup, and its sandbox's init was not ours)"
    cpu = f"{used.cpu_s:.2f} s of CPU" if used.cpu_s is not None else "CPU time not measured"
    if used.memory_peak_bytes is None:
        memory = "memory not measured"
    else:
        whose = "the whole run" if used.memory_measured == "cgroup" else "its largest process"
        memory = f"{used.memory_peak_bytes / 1048576:.1f} MiB of memory at its peak ({whose}, by {used.measured_by})"
    return f"warden: used {cpu} and {memory}"
