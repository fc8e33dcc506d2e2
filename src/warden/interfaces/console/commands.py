"""The console's one way to act and to read: a command line run through the CLI's handlers."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from warden.core.errors import WardenError
from warden.interfaces.cli.main import Context, dispatch
from warden.interfaces.cli.output import printable

if TYPE_CHECKING:
    import argparse

    from warden.bootstrap import App

__all__ = ["Commands", "Done", "as_words", "home_relative"]

# Commands after which the console opens the home again, as a new `warden` process would see it:
# a changed setting reaches every service (root folder, limits) only through a fresh App.
_REOPENS = frozenset({("config", "set")})


@dataclass(frozen=True)
class Done:
    """One command's outcome: its data (as `--json` gives it) or its error, and the text to show."""

    words: tuple[str, ...]
    ok: bool
    data: Any
    text: str
    code: str | None = None  # the error code when not ok

    @property
    def command(self) -> str:
        """The command line a person would type for the same result."""
        return "warden " + shlex.join(self.words)

    @property
    def line(self) -> str:
        """One line for the status bar: the result, or `warden: <error>` as the CLI prints it."""
        first = self.text.split("\n", 1)[0] if self.text else ("done" if self.ok else "")
        return first if self.ok else f"warden: {first}"


class _Context(Context):
    """The CLI's handler context, with its notes kept for the console instead of printed."""

    def __init__(self, args: argparse.Namespace, environ: dict[str, str], app: App) -> None:
        super().__init__(args, environ)
        self._app = app
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)

    def close(self) -> None:  # the App belongs to the console, which closes it once
        pass


class Commands:
    """Runs command lines for the console on one wired App (reopened after a settings change)."""

    def __init__(self, open_app: Callable[[], App]) -> None:
        self._open_app = open_app
        self.app = open_app()
        self.environ: dict[str, str] = {**self.app.environ, "WARDEN_HOME": str(self.app.home.root)}

    def run(self, *words: str) -> Done:
        """Run `warden WORDS…` (no printing, no exit); a refusal comes back as a Done, not raised."""
        import argparse

        ctx = _Context(argparse.Namespace(), self.environ, self.app)
        try:
            out = dispatch(ctx, words)
        except WardenError as exc:
            return Done(tuple(words), False, None, printable(exc.message), exc.code)
        if tuple(words[:2]) in _REOPENS:
            self.reopen()
        text = out.human() if not out.streamed else ""
        text = "\n".join([text, *(printable(n) for n in ctx.notes)]).strip("\n")
        return Done(tuple(words), out.exit_code == 0, out.data, text,
                    None if out.exit_code == 0 else "failed")

    def data(self, *words: str) -> Any:
        """The data of a reading command (`list`, `audit`…); WardenError when it is refused."""
        done = self.run(*words)
        if not done.ok:
            raise _Refused(done.text, done.code or "internal")
        return done.data

    def reopen(self) -> None:
        old, self.app = self.app, self._open_app()
        old.close()

    def close(self) -> None:
        self.app.close()


class _Refused(WardenError):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def home_relative(path: object, environ: Mapping[str, str]) -> str:
    """A path as a person reads it: under their home folder as `~/…` (shorter, and the same on
    every machine, which keeps the console's screenshots stable)."""
    text = str(path)
    home = environ.get("HOME", "").rstrip("/")
    if home and (text == home or text.startswith(home + "/")):
        text = "~" + text[len(home):]
    return printable(text)


def as_words(value: str) -> list[str]:
    """A typed value as the last word of a command line: after `--` when it starts with a dash,
    so `-1` is read as a value, never as an option."""
    return ["--", value] if value.startswith("-") else [value]
