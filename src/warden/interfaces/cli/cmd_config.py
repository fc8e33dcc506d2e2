"""`warden init` and `warden config show|get|set`."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output, table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("init", parents=[common], help="create WARDEN_HOME, config and keys (idempotent)")
    p.add_argument("--reset-keys", action="store_true",
                   help="make a new token pepper and master key: voids every grant token and every "
                        "stored secret (needs --yes)")
    p.add_argument("--yes", action="store_true", help="confirm --reset-keys")
    p.add_argument("--join", metavar="URL",
                   help="set this home up as another node of a cluster: URL is the cluster's shared registry "
                        "(postgresql+psycopg://USER@HOST:PORT/DB, what WARDEN_DATABASE_URL takes); this node's "
                        "cluster key (keys/cluster.key or WARDEN_CLUSTER_KEY, copied from a node) must be the "
                        "cluster's")
    p.set_defaults(handler=_init)

    config = sub.add_parser("config", parents=[common], help="show or change settings")
    csub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True,
                                 parser_class=type(config))
    show = csub.add_parser("show", parents=[common], help="every setting, its value and its source")
    show.set_defaults(handler=_show)
    get = csub.add_parser("get", parents=[common], help="one setting's value")
    get.add_argument("key")
    get.set_defaults(handler=_get)
    put = csub.add_parser("set", parents=[common], help="write one setting to config.toml")
    put.add_argument("key")
    put.add_argument("value")
    put.set_defaults(handler=_set)


def _init(ctx: Context, args: argparse.Namespace) -> Output:
    if args.reset_keys and not args.yes:
        from warden.core.errors import InvalidInput

        raise InvalidInput("--reset-keys makes a new token pepper and master key: every grant token and "
                           "every stored secret stops working; add --yes to do it")
    app = ctx.app
    if args.join is not None:
        app = _join(app, args.join, reset_keys=args.reset_keys)
    created = app.home_setup.init(reset_keys=args.reset_keys)
    data: dict[str, object] = {"home": str(app.home.root), "created": created,
                               "database": app.registry.url.split("@")[-1], "cluster": app.clustered}
    text = f"Warden home: {data['home']}" + (f" (created {', '.join(created)})" if created else " (already set up)")
    if app.clustered:
        state = app.cluster_keys.check()
        data["keyring"] = {"version": state.version, "kek_id": state.kek_id}
        text += (f"\nnode of the cluster at {data['database']} (cluster key {state.kek_id}, "
                 f"from {app.cluster_keys.source()})")
    return Output(data, text)


def _join(app: Any, raw_url: str, *, reset_keys: bool) -> Any:
    """Check this node's cluster key against the registry at URL, record URL in config.toml, and
    answer the home wired again on it. Nothing is written when the keys differ."""
    from warden.adapters.home_state import is_marked
    from warden.bootstrap import config_file
    from warden.core.errors import InvalidInput
    from warden.services.keys import check_cluster_url
    from warden.services.settings import set_setting

    if reset_keys:
        raise InvalidInput("--reset-keys and --join do not go together: a joining node never makes keys")
    url = check_cluster_url(raw_url)
    from_env = app.environ.get("WARDEN_DATABASE_URL")
    if from_env is not None and check_cluster_url(from_env) != url:
        raise InvalidInput("WARDEN_DATABASE_URL names another registry than --join; unset it or make them agree")
    recorded = app.settings.get_str("database.url") or None
    app.home_setup.join(url, keyring_at=app.keyring_at,
                        record=lambda value: set_setting(config_file(app.home), "database.url", value),
                        current_url=check_cluster_url(recorded) if recorded else None,
                        set_up=is_marked(app.home.root))
    return app.reloaded()


def _value_text(value: object) -> str:
    """What `config set` accepts back (round trip: `config set K "$(config get K)"`)."""
    from warden.core.settings import format_value

    return format_value(value)


def _show(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.core.settings import KEYS

    settings = ctx.app.settings
    data = [{"key": k, "value": settings.get(k), "source": settings.source(k),
             "description": KEYS[k].description} for k in KEYS]
    return Output(data, render=lambda d: table(
        ["Key", "Value", "Source"], [[r["key"], _value_text(r["value"]), r["source"]] for r in d]))


def _get(ctx: Context, args: argparse.Namespace) -> Output:
    settings = ctx.app.settings
    value = settings.get(args.key)
    return Output({"key": args.key, "value": value, "source": settings.source(args.key)},
                  _value_text(value))


def _set(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.bootstrap import Home, config_file
    from warden.core.errors import WardenError
    from warden.services.settings import set_setting  # not at import: `warden --help` loads this module

    value = set_setting(config_file(Home.locate(getattr(args, "home", None), ctx.environ)), args.key, args.value)
    data: dict[str, object] = {"key": args.key, "value": value}
    text = f"{args.key} = {_value_text(value)}"
    try:
        ctx.app.audit.record(actor="user", action="config.set", target=args.key, detail={"value_set": True})
    except WardenError as exc:
        data["warning"] = exc.message
        if exc.code == "invalid":  # another setting in the file is still wrong: the change is written
            text += f"\nstill to fix: {exc.message}"
        else:  # the registry cannot take the audit row now (a full disk, a database down)
            text += f"\nwritten, but not in the audit log: {exc.message}"
        return Output(data, text)
    servers = _servers_running(ctx)
    if servers:
        # Each `warden serve` reads the settings once, as it starts; each CLI command (the
        # daemon's included) reads them again. A change the person believed
        # made did not reach the bots until the server was restarted, and nothing said so.
        pids = ", ".join(str(i.pid) for i in servers)
        data["restart"] = [{"pid": i.pid, "url": i.url} for i in servers]
        text += (f"\nnote: the running `warden serve` (pid {pids}) keeps the settings it started with; "
                 "restart it for the API to use this")
    if args.key == "sandbox.allowed_commands" and not ctx.app.settings.get_bool("sandbox.enabled"):
        note = ("the allowlist is not enforced while sandbox.enabled is false; "
                "`warden config set sandbox.enabled true` turns it on")
        data["note"] = note
        text += f"\nnote: {note}"
    return Output(data, text)


def _servers_running(ctx: Context) -> list[Any]:
    """This home's `warden serve` processes on this machine (none when the registry cannot say)."""
    from warden.core.errors import WardenError

    try:
        return ctx.app.instances.running_here("serve")
    except WardenError:
        return []
