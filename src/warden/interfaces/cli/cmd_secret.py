"""`warden secret set|list|rm|rotate-key`: encrypted secrets injected into bot runs.

A secret's value is read from stdin only, never from an argument, so it never shows in `ps`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from warden.core.errors import InvalidInput
from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    secret = sub.add_parser("secret", parents=[common], help="encrypted secrets injected into bot runs")
    ssub = secret.add_subparsers(dest="secret_command", metavar="ACTION", required=True,
                                 parser_class=type(secret))
    p = ssub.add_parser("set", parents=[common], help="store a secret; the value is read from stdin")
    p.add_argument("key")
    p.set_defaults(handler=_secret_set)
    p = ssub.add_parser("list", parents=[common], help="list secret names (never values)")
    p.set_defaults(handler=_secret_list)
    p = ssub.add_parser("rm", parents=[common], help="remove a secret")
    p.add_argument("key")
    p.set_defaults(handler=_secret_rm)
    p = ssub.add_parser("rotate-key", parents=[common], help="re-encrypt every secret under a new master key")
    p.set_defaults(handler=_secret_rotate)


def _read_value() -> bytes:
    if sys.stdin is None:
        raise InvalidInput("no value: pipe the secret on stdin")
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass("secret value (not echoed): ").encode("utf-8")
    return sys.stdin.buffer.read(1024 * 1024)


def _secret_set(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.grants import check_secret_name

    check_secret_name(args.key)
    created = ctx.app.secrets.set(args.key, _read_value())
    return Output({"name": args.key, "created": created},
                  f"{'stored' if created else 'replaced'} secret {args.key} (encrypted)")


def _secret_list(ctx: Context, args: argparse.Namespace) -> Output:
    listed = [row.to_json() for row in ctx.app.secrets.list_secrets()]
    return Output(listed, render=lambda d: table(["Secret", "Key", "Updated"],
                                                 [[s["name"], s["key_id"], str(s["updated"])[:19]] for s in d])
                  if d else "no secrets (store one with `warden secret set NAME < file`)")


def _secret_rm(ctx: Context, args: argparse.Namespace) -> Output:
    naming = ctx.app.secrets.remove(args.key)
    said = f"removed secret {args.key}"
    if naming:
        held = ", ".join(f"{g.bot} on {g.workspace} ({g.accessor})" for g in naming[:5])
        more = f" and {len(naming) - 5} more" if len(naming) > 5 else ""
        said += (f"\nnote: {len(naming)} live grant(s) still name it: {held}{more}; their commands now run "
                 f"without it (`warden secret set {args.key}` stores it again, `warden revoke` ends a grant)")
    return Output({"name": args.key, "removed": True, "still_named_by": [g.accessor for g in naming]}, said)


def _secret_rotate(ctx: Context, args: argparse.Namespace) -> Output:
    detail = ctx.app.keys.rotate("secrets")  # a cluster's keyring, or keys/master.key on one machine
    kid, count = detail["key_id"], detail["resealed"]
    return Output({"key_id": kid, "resealed": count},
                  f"new master key {kid}; re-encrypted {count} secret(s)")
