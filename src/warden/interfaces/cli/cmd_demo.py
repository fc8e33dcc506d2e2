"""`warden demo`: a short guided tour of what Warden enforces, on a real workspace.

Each step calls the same services as the CLI and the API and prints what happened and why;
nothing here is simulated. The tour leaves the workspace `demo` behind for the user to explore.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warden.core.errors import Conflict, WardenError
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output

if TYPE_CHECKING:
    from warden.bootstrap import App


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("demo", parents=[common], help="a short guided tour on a real workspace")
    p.add_argument("--workspace", help="workspace to use (created when missing; default: demo, when it is missing "
                                        "or one an earlier tour left)")
    p.set_defaults(handler=_demo)


GREETING = "hello from the tour\n"
# Each step shows the command that does what it shows: a person copies them.
LOOK_AROUND = "pwd; ls /home /root 2>&1; cat /etc/shadow 2>&1 | head -1"


class _Tour:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.steps: list[dict[str, object]] = []

    def say(self, text: str) -> None:
        if not self.quiet:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def step(self, title: str, command: str, action: Callable[[], str], *, expect_refusal: bool = False) -> None:
        """Run one step; a refusal is the expected outcome of an attack step."""
        self.say(f"\n== {title}\n   $ {command}")
        try:
            shown = action()
            outcome, ok = shown, not expect_refusal
        except WardenError as exc:
            outcome, ok = f"refused ({exc.code}): {exc.message}", expect_refusal
        self.say("   " + outcome.replace("\n", "\n   "))
        self.steps.append({"step": title, "command": command, "outcome": outcome, "as_expected": ok})


def _refuse_another_demo(app: App, name: str) -> None:
    """The tour writes files and plants a link in its workspace: a `demo` it did not leave (a bot's,
    as `warden serve`'s own example names one, or the person's) is not taken without being named."""
    try:
        record = app.workspaces.get(name)
    except WardenError:
        return  # missing: the tour makes it
    try:
        left = app.files(record).read_text("/notes/hello.txt") == GREETING
    except WardenError:
        left = False
    if not left:
        maker = record.created_by or "user"
        whose = "yours" if maker == "user" else f"made by {maker.removeprefix('bot:')}"
        raise Conflict(f"workspace {name} exists ({whose}) and is not one an earlier tour left; the tour would write "
                       f"into it: give it another, `warden demo --workspace NAME` (`scripts/run demo --workspace "
                       f"NAME`), or name {name} there to use it anyway")


def _demo(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.services.files import approve_local_user

    app = ctx.app
    tour = _Tour(quiet=ctx.json)
    app.home_setup.init()
    name = args.workspace or "demo"
    if args.workspace is None:
        _refuse_another_demo(app, name)
    tour.say(f"Warden home: {app.home.root}\nThis tour uses the workspace {name!r}; every step is in the audit log.")

    def create() -> str:
        try:
            record = app.workspaces.get(name)
            return f"workspace {name} already exists at {record.path} ({record.status})"
        except WardenError:
            record = app.workspaces.create(name)
            return f"created workspace {name} at {record.path}"

    tour.step("A workspace is a folder with its own metadata", f"warden create {name}", create)
    record = app.workspaces.get(name)
    files = app.files(record, approver=approve_local_user)

    tour.step("Files are written atomically, paths relative to the workspace",
              f"echo {shlex.quote(GREETING.strip())} | warden fs {name} write /notes/hello.txt",
              lambda: f"wrote {files.write_text('/notes/hello.txt', GREETING)} bytes")
    tour.step("...and read back", f"warden fs {name} cat /notes/hello.txt",
              lambda: files.read_text("/notes/hello.txt").strip())
    tour.step("`..` cannot climb out of the workspace", f"warden fs {name} cat ../../etc/passwd",
              lambda: files.read_text("../../etc/passwd")[:40], expect_refusal=True)
    link = os.path.join(record.path, "notes", "passwd-link")
    if not os.path.lexists(link):
        os.symlink("/etc/passwd", link)  # a link a bot might plant, pointing out of the workspace
    tour.step("A symlink planted inside does not lead outside", f"warden fs {name} cat /notes/passwd-link",
              lambda: files.read_text("/notes/passwd-link")[:40], expect_refusal=True)
    tour.step("Listings show links as links, never their targets", f"warden fs {name} ls /notes",
              lambda: ", ".join(f"{e.name} ({e.type})" for e in files.list("/notes")))

    def check() -> str:
        decision = app.sandbox_paths.check("/etc/shadow", "read")
        return decision.rule

    tour.step("Protected system paths are refused, and the rule is named",
              "warden sandbox check /etc/shadow --op read", check)

    def run(argv: list[str]) -> Callable[[], str]:
        def go() -> str:
            result = app.runs.run(name, argv, timeout=20)
            text = (result.stdout + result.stderr).strip()
            return f"exit {result.exit_code}: {text[-300:]}"
        return go

    tour.step("Commands run in a bubblewrap sandbox: the workspace is home, the host is not there",
              f"warden run {name} -- sh -c {shlex.quote(LOOK_AROUND)}", run(["sh", "-c", LOOK_AROUND]))
    tour.step("No network unless allowed", f"warden run {name} -- python3 -c 'socket to 1.1.1.1:53'",
              run(["python3", "-c", "import socket\ntry:\n socket.create_connection(('1.1.1.1', 53), 2)\n"
                   " print('connected')\nexcept OSError as e:\n print('no network:', e)"]))

    def verify() -> str:
        count, broken = app.audit.verify()
        return f"{count} events, chain intact" if broken is None else f"BROKEN at row {broken.seq}"

    tour.step("Everything above was recorded in a hash-chained audit log", "warden audit verify", verify)
    tour.say(f"\nNext: `warden audit --limit 20`, `warden fs {name} ls /`, `warden run {name} -- python3 -V`,"
             " `warden serve` for bots.")
    failed = [s for s in tour.steps if not s["as_expected"]]
    return Output({"workspace": name, "steps": tour.steps, "ok": not failed}, streamed=True,
                  exit_code=1 if failed else 0)
