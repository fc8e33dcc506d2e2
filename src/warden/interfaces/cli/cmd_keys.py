"""`warden keys show|rotate|retire-pepper`: the keys tokens and secrets depend on (services/keys.py).

In a cluster they are the keyring in the shared registry (wrapped under the cluster key each
node holds); on one machine, the files in keys/.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, printable, table

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    keys = sub.add_parser("keys", parents=[common], help="show or rotate the keys tokens and secrets depend on")
    ksub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True, parser_class=type(keys))
    p = ksub.add_parser("show", parents=[common], help="where this node's keys come from, and their ids (never keys)")
    p.set_defaults(handler=_show)
    p = ksub.add_parser("rotate", parents=[common],
                        help="a new key: kek (re-wraps the keyring), secrets (re-seals every secret) or pepper "
                             "(old tokens keep working until retire-pepper)")
    p.add_argument("what", choices=("kek", "secrets", "pepper"))
    p.add_argument("--if-version", type=int, metavar="N",
                   help="only if the cluster's keyring is still at version N (`keys show`); else conflict")
    p.add_argument("--key-file", type=Path, metavar="FILE",
                   help="with kek: the new cluster key from FILE (base64 of 32 random bytes) instead of a new one")
    p.set_defaults(handler=_rotate)
    p = ksub.add_parser("retire-pepper", parents=[common],
                        help="forget the peppers kept after rotations: tokens minted before them stop working")
    p.add_argument("--if-version", type=int, metavar="N", help="only if the keyring is still at version N")
    p.add_argument("--yes", action="store_true", help="confirm: bots re-register, grants are issued again")
    p.set_defaults(handler=_retire)


def _render_show(data: dict[str, Any]) -> str:
    if data["mode"] == "local":
        return f"keys of this home (one machine): pepper {data['pepper']}; secrets {data['secrets']}"
    mine = data["node_kek_id"] or "none"
    if data.get("keyring") is None and "version" not in data:
        return f"cluster registry without a keyring yet; this node's cluster key: {mine} ({data['node_kek_source']})"
    verdict = "matches" if data["matches"] else "DOES NOT MATCH (this node is refused)"
    head = (f"cluster keyring version {data['version']}, cluster key {data['kek_id']}; this node's key {mine} "
            f"({printable(data['node_kek_source'])}) {verdict}")
    rows = [[k["purpose"], k["id"], k["state"], str(k["created"])[:19]] for k in data["keys"]]
    return head + "\n" + table(["Purpose", "Key", "State", "Created"], rows)


def _show(ctx: Context, args: argparse.Namespace) -> Output:
    return Output(ctx.app.keys.show().to_json(), render=_render_show)


def _rotate(ctx: Context, args: argparse.Namespace) -> Output:
    new_kek = None
    if args.key_file is not None:
        from warden.adapters.cluster_keys import read_new_kek

        new_kek = read_new_kek(args.key_file)
    detail = ctx.app.keys.rotate(args.what, expected=args.if_version, new_kek=new_kek)
    if args.what == "kek":
        where = detail.get("key_file") or "WARDEN_CLUSTER_KEY (set the new key there on every node)"
        text = (f"new cluster key {detail['kek_id']} (keyring version {detail['version']}), kept in {where}; "
                "copy it to every other node: until then they are refused (keys_mismatch)")
    elif args.what == "pepper":
        text = (f"new pepper {detail['key_id']} (keyring version {detail['version']}); tokens minted before still "
                "verify under the old one until `warden keys retire-pepper`")
    else:
        text = f"new secrets key {detail['key_id']}; re-encrypted {detail['resealed']} secret(s)"
    return Output(detail, text)


def _retire(ctx: Context, args: argparse.Namespace) -> Output:
    if not args.yes:
        from warden.core.errors import InvalidInput

        raise InvalidInput("retiring the old peppers voids every token minted before the last pepper rotation "
                           "(bots register again, grants are issued again); add --yes to do it")
    detail = ctx.app.keys.retire_peppers(expected=args.if_version)
    gone = detail["retired"]
    text = f"retired {len(gone)} old pepper(s)" if gone else "no old pepper to retire"  # type: ignore[arg-type]
    return Output(detail, text)
