"""`warden backup FILE [--workspaces]` and `warden restore FILE [--yes]` (adapters/backup)."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("backup", parents=[common],
                       help="save the home's registry, keys and settings (and workspaces) to one file",
                       description="A consistent snapshot of $WARDEN_HOME: the SQLite registry (copied "
                                   "while Warden keeps running), keys, settings, path lists and "
                                   "templates; --workspaces adds the workspaces and archives. The file "
                                   "holds the keys: keep it as safe as the home.")
    p.add_argument("file", help="where to write the backup (a .tar.gz)")
    p.add_argument("--workspaces", action="store_true", help="include the workspaces' folders and archives")
    p.set_defaults(handler=_backup)
    p = sub.add_parser("restore", parents=[common], help="restore a home from `warden backup`",
                       description="Put a backup's registry, keys and settings (and workspaces) back into "
                                   "$WARDEN_HOME. A home that already holds a registry needs --yes; what "
                                   "is replaced is kept beside it as NAME.replaced-TIME.")
    p.add_argument("file", help="the backup file")
    p.add_argument("--yes", action="store_true", help="replace the registry and keys this home holds")
    p.set_defaults(handler=_restore)


def _backup(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.adapters.backup import backup_home

    app = ctx.app
    sqlite = not app.clustered and app.database_url is None
    db_path = app.home.root / "warden.db" if sqlite else None
    if sqlite:
        app.registry  # noqa: B018 - the registry must be there (a lost one is an error, not an empty backup)
    from pathlib import Path

    result = backup_home(app.home.root, db_path, Path(args.file), workspaces_root=app.root_dir,
                         include_workspaces=args.workspaces, keys_steady=app.keystore.sealing())
    app.audit.record(actor="user", action="home.backup", target=str(result["file"]),
                     detail={"holds": result["holds"], "size": result["size"]})
    note = "" if sqlite else " (the PostgreSQL registry is not in it: back it up with pg_dump)"
    return Output(result, f"backed up {_names(result['holds'])} to {result['file']}{note}")


def _restore(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.adapters.backup import restore_home

    # Never through the App's registry before it is back: a home whose registry was lost is
    # exactly what needs a restore.
    home = ctx.app.home.root
    from pathlib import Path

    result = restore_home(Path(args.file), home, replace=args.yes)
    text = f"restored {_names(result['restored'])} into {home}"
    if result.get("moved_from"):
        text += (f"\nits workspaces' paths moved from {result['moved_from']} to this home; env layers are not in a "
                 "backup: `warden health --all --repair` builds them here")
        missing = [str(name) for name in _listed(result.get("workspaces_without_files"))]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            text += (f"\nthe files of {shown} are not in this backup (made without --workspaces): they show broken "
                     "here, which no repair mends; restore a backup made with `warden backup FILE --workspaces`")
    if result["set_aside"]:
        text += f"\nthe files it replaced are kept: {_names(result['set_aside'])}"
    ctx.app.audit.record(actor="user", action="home.restore", target=str(args.file), detail=result)
    return Output(result, text)


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _names(value: object) -> str:
    return ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
