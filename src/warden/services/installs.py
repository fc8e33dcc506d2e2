"""`warden install NAME PKG... [--node] [--no-persist]`: add packages to one workspace.

The installer runs inside the sandbox (never on the host: a package's build or install
step is code from the internet), with the network limited to the package indexes
(`envs.install_domains`) or, with `envs.no_index`, no network and the `envs.find_links`
folders mounted read-only. Python packages go into the workspace's thin venv with the
venv's own `python -m pip`, which sees the layer's packages through the `.pth` and so
installs only what is missing; where neither the layer nor the venv has pip (an interpreter
without ensurepip's wheel, as Debian's python3), with Warden's own uv, mounted read-only,
which does not read the `.pth` and so installs the layer's packages that the new ones need
again (correct, larger). Node packages go into its `node_modules` with npm. The shared
layers stay untouched (they are mounted read-only). Then the requirement is recorded in
`pyproject.toml` (tomlkit keeps comments and layout) or `package.json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from warden.core.errors import Conflict, InvalidInput, NotFound, TooLarge, Unavailable, WardenError
from warden.core.layers import UV_PROGRESS_LOG, IndexOptions, install_unresolvable, is_uv_log_line
from warden.core.limits import Limits
from warden.core.ports import NpmTarballs, SafeRoots, SandboxTools, WorkspaceFolders, WorkspaceRoot
from warden.core.runs import Sink
from warden.core.settings import Settings
from warden.core.templates import normalized_name, requirement_name, requirement_problem
from warden.core.workspaces import WorkspaceRecord
from warden.services.audit import AuditLog

if TYPE_CHECKING:
    from warden.services.checkpoints import CheckpointService
    from warden.services.leases import Lease
    from warden.services.quota import QuotaService
    from warden.services.runs import RunOutput, RunService
    from warden.services.workspaces import WorkspaceService

__all__ = ["MANIFEST_MAX", "InstallResult", "InstallService", "check_packages", "record_node", "record_python"]

_NPM_SPEC = re.compile(r"^(?:@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*(?:@[^\s]+)?$")
_NPM_FILE = re.compile(r"^(?:file:)?/[^\s]+\.tgz$")


def check_packages(packages: Sequence[str], *, node: bool) -> list[str]:
    """Package arguments, refusing anything an installer would read as an option."""
    if not packages:
        raise InvalidInput("name at least one package to install")
    checked = []
    for package in packages:
        text = package.strip()
        if node and _NPM_FILE.match(text):
            checked.append(text if text.startswith("file:") else "file:" + text)
            continue
        if node:
            bad = not text or text.startswith("-") or "\n" in text or not _NPM_SPEC.match(text)
            why = "give an npm package (name or name@range)"
        else:
            problem = requirement_problem(text)
            bad = problem is not None
            why = f"{problem}; give a requirement such as pandas>=2.1"
        if bad:
            raise InvalidInput(f"bad package {package!r}: {why}")
        checked.append(text)
    return checked


# Manifests Warden edits for the person are bot-written files: read and written by descriptor
# beneath the workspace (no link, FIFO or device followed, size-capped), never by a path the bot
# could swap between a check and the open.
MANIFEST_MAX = 1 << 20


def _read_manifest(root: WorkspaceRoot, name: str) -> str:
    """The text of workspace manifest `name`, "" when it does not exist."""
    try:
        return root.read_text(name)
    except NotFound:
        return ""
    except TooLarge:
        raise InvalidInput(f"{name} is over {MANIFEST_MAX} bytes; Warden does not edit it (use "
                           "--no-persist, or record the package yourself)") from None


# What Warden edits with tomlkit, whose parse of a bot's file grows faster than its size: 3,000
# dotted keys in 1,000 tables (43 KiB) took 9 s, 5,000 in 1,500 over a minute of the server's CPU
# for each install a bot asked for (abandoned at api.request_timeout, still parsing). A person's
# pyproject.toml holds a few hundred keys at most (Warden's own, with its tools' settings, 154).
MANIFEST_KEYS = 1000  # keys and tables, at every depth
MANIFEST_ITEMS = 20_000  # array items, at every depth (linear for tomlkit: 0.8 s)


def _editable_toml(text: str) -> None:
    """InvalidInput unless `text` is TOML small enough in keys and items for tomlkit to edit
    (counted by tomllib, which parses in time linear in the text)."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        raise InvalidInput("pyproject.toml is not valid TOML; fix it or use --no-persist") from None
    keys = items = 0
    pending: list[object] = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            keys += len(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            items += len(value)
            pending.extend(value)
        if keys > MANIFEST_KEYS or items > MANIFEST_ITEMS:
            raise InvalidInput(f"pyproject.toml holds more than {MANIFEST_KEYS} keys or {MANIFEST_ITEMS} array items; "
                               "Warden does not edit it (use --no-persist, or record the package yourself)")


def record_python(root: WorkspaceRoot, requirements: Sequence[str], *, dry: bool = False) -> bool:
    """Add (or replace, by name) `requirements` in pyproject.toml's [project].dependencies, keeping
    comments. `dry`: only say (InvalidInput) whether it could, writing nothing."""
    import tomlkit

    text = _read_manifest(root, "pyproject.toml")
    _editable_toml(text)
    try:
        doc = tomlkit.parse(text) if text else tomlkit.document()
    except (tomlkit.exceptions.ParseError, RecursionError):  # the workspace's file: a typo, or a bot's
        raise InvalidInput("pyproject.toml is not valid TOML; fix it or use --no-persist") from None
    project = doc.get("project")
    deps = project.get("dependencies") if isinstance(project, dict) else None
    if (project is not None and not isinstance(project, dict)) or (deps is not None and not isinstance(deps, list)):
        raise InvalidInput("pyproject.toml's [project] dependencies are not a list Warden can add to; fix it or "
                           "use --no-persist")
    if dry:
        return False
    if project is None:
        project = tomlkit.table()
        project["name"] = "workspace"
        project["version"] = "0.1.0"
        doc["project"] = project
    deps = project.get("dependencies")
    if deps is None:
        deps = tomlkit.array()
        deps.multiline(True)
        project["dependencies"] = deps
    changed = False
    for req in requirements:
        name = normalized_name(requirement_name(req) or req)
        same = [i for i, d in enumerate(deps) if normalized_name(requirement_name(str(d)) or "") == name]
        if same:
            if str(deps[same[0]]) != req:
                deps[same[0]] = req
                changed = True
        else:
            deps.append(req)
            changed = True
    if changed:
        root.write_text("pyproject.toml", tomlkit.dumps(doc))
    return changed


def record_node(root: WorkspaceRoot, specs: Sequence[str], installed: dict[str, str], *,
                tarball_name: Callable[[str], str] | None = None, dry: bool = False) -> bool:
    """Add `specs` to package.json's dependencies (order and other keys kept); `tarball_name`
    reads the package name inside a `file:` tarball. `dry`: only say (InvalidInput) whether it
    could, writing nothing."""
    try:
        data = json.loads(_read_manifest(root, "package.json") or "{}")
    except (ValueError, RecursionError):  # a bot may have written it: `[[[[…` nested past the stack too
        raise InvalidInput("package.json is not valid JSON; fix it or use --no-persist") from None
    deps = data.setdefault("dependencies", {}) if isinstance(data, dict) else None
    if not isinstance(deps, dict):
        raise InvalidInput("package.json has no dependencies object Warden can add to; fix it or "
                           "use --no-persist")
    if dry:
        return False
    changed = False
    for spec in specs:
        if spec.startswith("file:"):
            if tarball_name is None:
                raise InvalidInput(f"cannot record {spec}: no way to read the tarball here; use --no-persist")
            name, value = tarball_name(spec[5:]), spec
        else:
            name, _, version = spec[1:].partition("@") if spec.startswith("@") else spec.partition("@")
            name = "@" + name if spec.startswith("@") else name
            value = version or (f"^{installed[name]}" if name in installed else "*")
        if deps.get(name) != value:
            deps[name] = value
            changed = True
    if changed:
        root.write_text("package.json", json.dumps(data, indent=2) + "\n")
    return changed


@dataclass(frozen=True)
class InstallResult:
    """What `warden install` did."""

    name: str
    packages: list[str]
    node: bool
    ok: bool
    exit_code: int
    recorded_in: str | None = None  # the manifest the packages were added to
    error: str | None = None  # the end of the installer's output, when it failed
    unresolvable: bool = False  # failed because the index has no such package or version

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "packages": list(self.packages), "node": self.node, "ok": self.ok,
                "exit_code": self.exit_code, "recorded_in": self.recorded_in, "error": self.error}


@dataclass(frozen=True)
class _Ran:
    exit_code: int
    stdout: str
    stderr: str


# A repair's reinstall in a broken workspace (the runs service runs only in ready ones).
_REPAIR_LIMITS = Limits(memory=2048 << 20, cpu_seconds=1200, pids=512, file_size=1024 << 20, timeout_s=1800)


class InstallService:
    """Sandboxed, incremental installs into one workspace."""

    def __init__(self, workspaces: WorkspaceService, quota: QuotaService, audit: AuditLog,
                 runs: Callable[[], RunService], *, tools: SandboxTools, roots: SafeRoots,
                 files: WorkspaceFolders, tarballs: NpmTarballs, settings: Settings,
                 checkpoints: Callable[[], CheckpointService] | None = None) -> None:
        self._workspaces = workspaces
        # An install rewrites pyproject.toml / package.json and the venv: a checkpoint first.
        self._checkpoints = checkpoints
        self._quota = quota
        self._audit = audit
        self._runs = runs
        self._tools = tools
        self._roots = roots
        self._files = files
        self._tarballs = tarballs
        self._settings = settings

    def available(self) -> bool:
        return self._tools.available()

    def install(self, name: str, packages: Sequence[str], *, node: bool = False, persist: bool = True,
                actor: str = "user", on_stdout: Sink | None = None, on_stderr: Sink | None = None) -> InstallResult:
        """Install `packages` into workspace `name` and (unless not `persist`) record them.
        `on_stdout`/`on_stderr`: the installer's output as it comes (a front end's progress bar
        reads it: pip speaks on stdout, uv on stderr)."""
        checked = check_packages(packages, node=node)
        record = self._workspaces.get(name)
        if record.status not in ("ready", "broken"):
            raise Conflict(f"workspace {name!r} is {record.status}; `warden resume {name}` it first")
        self._quota.check_room(name, record.path)  # a full workspace: TooLarge before anything runs
        if self._checkpoints is not None:
            self._checkpoints().create(record, f"before install {' '.join(checked)}"[:1000], actor)
        try:
            result = self.install_record(record, checked, node=node, persist=persist,
                                         on_stdout=on_stdout, on_stderr=on_stderr)
        except TooLarge as exc:  # stopped by the disk quota (or a manifest over its size)
            self._audit.record(actor=actor, action="workspace.install", target=name, result=exc.code,
                               rule=exc.rule or "", detail={"packages": checked, "node": node})
            raise
        self._audit.record_made(actor=actor, action="workspace.install", target=name,
                                result="ok" if result.ok else f"exit {result.exit_code}",
                                detail={"packages": checked, "node": node, "persist": persist,
                                        "recorded_in": result.recorded_in})
        with contextlib.suppress(WardenError):  # installed: when it was last used is no outcome
            self._workspaces.touch(name)
        failed = f"installing {', '.join(checked)} failed (exit {result.exit_code}): {result.error}"
        if not result.ok and result.unresolvable:
            # Not an outage: the same request fails the same way (400, not 503 a client may retry).
            raise InvalidInput(f"{failed}; the index holds no such package or version: check the name and the "
                               "version asked for", rule="install.unresolvable")
        if not result.ok:
            raise Unavailable(failed)
        return result

    def install_record(self, record: WorkspaceRecord, packages: Sequence[str], *, node: bool,
                       persist: bool, lease: Lease | None = None, on_stdout: Sink | None = None,
                       on_stderr: Sink | None = None) -> InstallResult:
        """Install into `record` (`lease`: the exclusive lease a caller such as repair holds)."""
        settings = self._settings
        env: dict[str, str] = {}
        ro_paths = _strings(record.meta.get("ro_paths"))
        no_index = settings.get_bool("envs.no_index")
        find_links = settings.get_list("envs.find_links")
        ro_paths += [link for link in find_links if link.startswith("/") and self._files.exists(link)]
        if node:
            argv = ["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--no-save",
                    "--no-package-lock", "--install-links", *packages]
            env.update({"npm_config_cache": "/tmp/.npm",  # noqa: S108 - the sandbox's private /tmp
                        "npm_config_update_notifier": "false",
                        # A line per package tarball for a progress bar that reads them, else errors only.
                        "npm_config_loglevel": "http" if on_stderr is not None else "error"})
            if settings.get_str("envs.npm_registry"):
                env["npm_config_registry"] = settings.get_str("envs.npm_registry")
            for spec in packages:
                if spec.startswith("file:") and spec[5:].startswith("/"):
                    ro_paths.append(os.path.dirname(spec[5:]))
        else:
            python = os.path.join(record.path, ".venv", "bin", "python")
            if not self._files.exists(python):
                raise Conflict(f"workspace {record.name!r} has no Python venv; `warden health {record.name} "
                               "--repair` re-creates it")
            index = IndexOptions(settings.get_str("envs.index_url"), tuple(find_links), no_index)
            if self._has_pip(record):
                argv = [python, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
                        "--no-input", "--no-warn-script-location", *packages]
                env["PIP_CONFIG_FILE"] = "/dev/null"
                env["PYTHONUNBUFFERED"] = "1"  # pip's lines as it goes (a progress bar reads them), not at exit
                env.update(index.pip_env())
            else:
                uv = self._tools.uv()
                ro_paths.append(uv)
                argv = [uv, "pip", "install", "--python", python, "--link-mode=copy", "--compile-bytecode",
                        *index.uv_args(), *packages]
                # No user or project config (a bot-written uv.toml must not steer it), no
                # interpreter downloads, a cache in the sandbox's own /tmp.
                env.update({"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1",
                            "UV_CACHE_DIR": "/tmp/.uv-cache"})  # noqa: S108 - the sandbox's private /tmp
                env["RUST_LOG"] = UV_PROGRESS_LOG  # a line per package prepared and installed, for a progress bar
        domains = [] if no_index and not node else settings.get_list("envs.install_domains")
        if domains:
            trust_env, trust_paths = self._tools.trust()
            env = {**trust_env, **env}
            ro_paths += trust_paths
        from warden.services.runs import RunOutput

        output = RunOutput(on_stdout=on_stdout, on_stderr=on_stderr)
        if persist:
            # The manifest that will record them, looked at first: one Warden cannot edit (a typo,
            # or a bot's) was found only after the packages were in, installed but not recorded.
            with self._roots.open(record.path, max_bytes=MANIFEST_MAX) as root:
                if node:
                    record_node(root, packages, {}, dry=True)
                else:
                    record_python(root, packages, dry=True)
        ran = self._run(record, argv, env, ro_paths, domains, lease, output)
        ok = ran.exit_code == 0
        # Whether the installer surely reached its index: local files only (`envs.no_index`), or the
        # network to it. Otherwise (no network, an index over it) pip without network says exactly
        # what it says of a package the index lacks, and a failure is no proof the request is wrong.
        reached = (no_index and not node) or bool(domains)
        recorded_in = None
        if ok and persist:
            with self._roots.open(record.path, max_bytes=MANIFEST_MAX) as root:
                if node:
                    if record_node(root, packages, _installed_versions(root, packages),
                                   tarball_name=self._tarballs.package_name):
                        recorded_in = "package.json"
                elif record_python(root, packages):
                    recorded_in = "pyproject.toml"
        error = None
        if not ok:
            error = _tail(ran.stderr or ran.stdout)
            if not reached:
                # The run's own hint ("run with --net allow, or `warden install` for packages") told
                # a person who had just run `warden install` to run it: its network is the setting's.
                error = (_tail(_without_network_hint(ran.stderr) or ran.stdout) + " | warden: installs reach "
                         "only the package indexes of envs.install_domains, and it lists none; a person adds "
                         "them with `warden config set envs.install_domains HOST:443,...` (or installs from local "
                         "wheels: envs.no_index with envs.find_links)")
        return InstallResult(record.name, list(packages), node, ok, ran.exit_code, recorded_in, error,
                             unresolvable=not ok and reached and install_unresolvable(_installers_own(ran)))

    def _has_pip(self, record: WorkspaceRecord) -> bool:
        """Whether `python -m pip` works in the workspace's venv: pip in the venv or its layer."""
        xy = ".".join(str(record.meta.get("python") or "").split(".")[:2])
        if not xy:
            return False
        layers = [os.path.join(p, "venv") for p in _strings(record.meta.get("ro_paths"))]
        venvs = [os.path.join(record.path, ".venv"), *layers]
        return any(self._files.exists(os.path.join(venv, "lib", f"python{xy}", "site-packages", "pip", "__init__.py"))
                   for venv in venvs)

    def _run(self, record: WorkspaceRecord, argv: list[str], env: dict[str, str], ro_paths: list[str],
             domains: list[str], lease: Lease | None, output: RunOutput | None = None) -> _Ran:
        ro = [p for p in dict.fromkeys(ro_paths) if self._files.exists(p)]
        if record.status == "ready":
            # The normal way: the runs service applies zones, path policy and auditing.
            result = self._runs().run(record.name, argv, env=env, ro_paths=ro, timeout=1800,
                                      net="allow" if domains else "none", allow_domains=domains,
                                      actor="warden-install", within=lease,
                                      output=output)
            if result.stopped_by is not None:  # the run's stderr ends with the quota's note
                note = result.stderr.rstrip().rsplit("\n", 1)[-1].removeprefix("warden: ")
                raise TooLarge(f"the install broke the workspace's disk quota: {note}", rule=result.stopped_by)
            return _Ran(result.exit_code, result.stdout, result.stderr)
        # Repairing a broken workspace: the runs service only runs in ready ones.
        outcome = self._tools.run(record.path, argv, env=env, ro_paths=ro, domains=domains, limits=_REPAIR_LIMITS)
        return _Ran(outcome.exit_code, outcome.stdout, outcome.stderr)


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _installers_own(ran: _Ran) -> str:
    """The installer's output without Warden's lines (its guess, say, that no network was why)."""
    return "\n".join(line for line in (ran.stderr + "\n" + ran.stdout).splitlines() if not line.startswith("warden: "))


def _without_network_hint(text: str) -> str:
    """The run's output without Warden's "the sandbox has no network" line (core/runs.explain_failure)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("warden: the sandbox has no network"))


def _tail(text: str) -> str:
    """The last lines a person would read (uv's and npm's log lines, asked for the progress bar, left out)."""
    lines = [line.strip() for line in text.strip().splitlines()
             if line.strip() and not is_uv_log_line(line) and not line.startswith("npm http ")]
    return " | ".join(lines[-4:]) or "no output"


def _installed_versions(root: WorkspaceRoot, specs: Sequence[str]) -> dict[str, str]:
    """Versions npm installed, read from node_modules/NAME/package.json (bot-writable files too)."""
    versions = {}
    for spec in specs:
        if spec.startswith("file:"):
            continue
        name = ("@" + spec[1:].partition("@")[0]) if spec.startswith("@") else spec.partition("@")[0]
        try:
            data = json.loads(root.read_text(f"node_modules/{name}/package.json"))
        except (WardenError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and isinstance(data.get("version"), str):
            versions[name] = data["version"]
    return versions
