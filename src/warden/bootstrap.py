"""The one place that reads settings and the environment and wires adapters into services."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from warden.adapters.config_file import read_config
from warden.adapters.store.db import open_database
from warden.adapters.store.registry import SqlRegistry
from warden.core.settings import Settings, resolve

if TYPE_CHECKING:
    from warden.adapters.cluster_keys import ClusterKeys
    from warden.adapters.exec_slots import HeldSlots
    from warden.adapters.gitguard import HostGitDefuser
    from warden.adapters.keystore import Keystore
    from warden.adapters.versions import HostVersionStore
    from warden.core.approvals import ApprovalRecord
    from warden.core.policy import EffectivePaths
    from warden.core.ports import ConfigFile, SandboxBackend
    from warden.core.workspaces import WorkspaceRecord
    from warden.core.zones import Zone
    from warden.services.approvals import ApprovalService
    from warden.services.audit import AuditLog
    from warden.services.auth import AuthService
    from warden.services.bot_requests import BotRequestService
    from warden.services.checkpoints import CheckpointService
    from warden.services.context import ContextService
    from warden.services.files import Approver, FileService
    from warden.services.folders import FolderService
    from warden.services.forwards import ForwardService
    from warden.services.git import GitService
    from warden.services.grants import GrantService
    from warden.services.health import HealthService
    from warden.services.installs import InstallService
    from warden.services.instances import InstanceService
    from warden.services.janitor import JanitorService
    from warden.services.keys import KeyService
    from warden.services.layers import LayerService
    from warden.services.leases import LeaseService
    from warden.services.lifecycle import LifecycleService
    from warden.services.live import LiveSandboxService
    from warden.services.locks import LockService
    from warden.services.quota import QuotaService
    from warden.services.runs import RunService
    from warden.services.sandbox_paths import SandboxPaths
    from warden.services.secrets import SecretService
    from warden.services.settings import HomeSetup
    from warden.services.sweeper import Sweeper
    from warden.services.watching import WatchService
    from warden.services.workspaces import WorkspaceService

__all__ = ["App", "Home", "act_for", "bootstrap", "config_file", "load_settings"]


@dataclass(frozen=True)
class Home:
    """The layout of $WARDEN_HOME."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def layers(self) -> Path:
        return self.root / "layers"

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    @property
    def cache(self) -> Path:
        """Download caches of Warden's own tools (uv), never the user's: sandboxed builds write there."""
        return self.root / "cache"

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def sandbox_paths(self) -> Path:
        """Global allowed/denied paths (JSON: `allowed_paths`/`denied_paths` lists of {path, mode})."""
        return self.root / "sandbox_paths.json"

    @property
    def versions(self) -> Path:
        """Checkpoints and kept versions of workspaces: content-addressed objects and manifests."""
        return self.root / "versions"

    @property
    def run(self) -> Path:
        """Live sandboxes' supervisor sockets (one 0700 folder each) and collected process output."""
        return self.root / "run"

    @classmethod
    def locate(cls, home: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Home:
        raw = home if home is not None else environ.get("WARDEN_HOME") or "~/.warden"
        return cls(Path(os.path.expanduser(raw)).absolute())


def utc_now() -> datetime:
    return datetime.now(UTC)


def load_settings(home: Home, environ: Mapping[str, str]) -> Settings:
    return resolve(read_config(home.config), environ, file_label=str(home.config))


class App:
    """Wired services for one process; heavier services are built on first use."""

    def __init__(self, home: Home, settings: Settings, environ: Mapping[str, str],
                 clock: Callable[[], datetime], *, node: str | None = None) -> None:
        self.home = home
        self.settings = settings
        self.environ = environ
        self.clock = clock
        # The node this process belongs to (`WARDEN_NODE`, default the host name), read once.
        self.node = node if node is not None else node_name(environ)
        # Per workspace folder: the path policy's `effective` answer and its digest (_path_policy).
        self._path_digests: dict[tuple[str, str | None], tuple[object, str]] = {}
        from warden.adapters.temp_key import use_key_source

        # Temporary files this process leaves in workspaces carry a MAC under a key of this home
        # (keys/temp-names.key, read or made on the first write), so a sweep can tell them from a bot's.
        use_key_source(lambda make: self.local_keystore.temp_names_key(make=make))

    @cached_property
    def root_dir(self) -> Path:
        configured = self.settings.get_str("sandbox.root_dir")
        return Path(os.path.expanduser(configured)).absolute() if configured else self.home.root / "workspaces"

    @cached_property
    def layer_cache(self) -> Path | None:
        """The layer cache shared with other homes (`envs.layer_cache`); None when unset or when
        it lies in the workspaces, where bots write."""
        configured = self.settings.get_str("envs.layer_cache")
        if not configured:
            return None
        folder = Path(os.path.normpath(Path(os.path.expanduser(configured)).absolute()))
        inside = Path(os.path.realpath(folder)).is_relative_to(os.path.realpath(self.root_dir))
        return None if inside or folder.is_relative_to(self.root_dir) else folder

    @cached_property
    def shared_state(self) -> list[str]:
        """Warden's folders outside the home that no sandbox may see (the layer cache), under the
        name configured and its real path: a link on the way must not hide it from the name check
        of allowed paths (the check by inode at each run sees through links and bind mounts)."""
        if self.layer_cache is None:
            return []
        real = os.path.realpath(self.layer_cache)
        return [str(self.layer_cache)] + ([real] if real != str(self.layer_cache) else [])

    @cached_property
    def database_url(self) -> str | None:
        """The shared registry's URL (WARDEN_DATABASE_URL, else `database.url` in config.toml, which
        `warden init --join` writes); None: the SQLite default in the home."""
        return self.settings.get_str("database.url") or None

    @property
    def clustered(self) -> bool:
        """Whether this home is a node of a cluster: its registry is shared, so its pepper and
        secrets key are the cluster's (wrapped in the registry), never files of its own."""
        url = self.database_url
        return url is not None and not url.startswith("sqlite")

    @cached_property
    def registry(self) -> SqlRegistry:
        """Workspaces, bots, grants, secrets, leases and the audit log (SQLite, or WARDEN_DATABASE_URL)."""
        from warden.adapters.home_state import check_owned, check_registry, check_registry_owned
        from warden.adapters.store.db import sqlite_path

        self.home.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_owned(self.home.root)  # made by someone else since bootstrap looked: exist_ok took it
        url = self.database_url
        if url is None:  # the SQLite default: a set-up home whose registry is gone is an error
            check_registry(self.home.root, self.home.root / "warden.db")
        elif (elsewhere := sqlite_path(url, self.home.root)) is not None:
            check_registry_owned(elsewhere)
        return SqlRegistry(open_database(url, self.home.root, busy_timeout=_busy_timeout(self.environ),
                                         node=self.node))

    @cached_property
    def audit(self) -> AuditLog:
        from warden.services.audit import AuditLog  # with the hash chain's hashlib: not for a plain read

        return AuditLog(self.registry, self.clock)

    @cached_property
    def workspaces(self) -> WorkspaceService:
        from warden.adapters.processes import HostProcesses
        from warden.adapters.workspace_io import HostArchives
        from warden.services.archives import ArchiveShelf
        from warden.services.workspaces import WorkspaceService

        shelf = ArchiveShelf(HostArchives(), self.home.archives, self.clock, self.settings)
        return WorkspaceService(self.registry, lambda: self.audit, self.clock, root_dir=self.root_dir,
                                folders=lambda: self.folders,
                                shelf=shelf, processes=HostProcesses(), node=self.node,
                                layers=lambda: self.layers, leases=lambda: self.leases,
                                on_destroyed=self._destroyed,
                                live_nodes=lambda: self.instances.live_nodes(), stop_live=self._stop_live)

    @cached_property
    def folders(self) -> FolderService:
        """Workspace folders on this machine; built at first use (the git guard and the safe file
        access it imports are not needed to list workspaces)."""
        from warden.adapters.workspace_io import HostWorkspaceIO
        from warden.services.folders import FolderService

        def git_defuser() -> HostGitDefuser:
            from warden.adapters.gitguard import HostGitDefuser

            return HostGitDefuser()

        return FolderService(HostWorkspaceIO(), git_defuser, self.settings, quota=lambda: self.quota)

    def _destroyed(self, record: WorkspaceRecord, actor: str) -> None:
        """What goes with a destroyed workspace: its checkpoints and versions, and the requests
        for approval still waiting on it (never to be carried out into a namesake)."""
        self.checkpoints.forget(record, actor)
        self.approvals.forget(record, actor)

    @cached_property
    def health(self) -> HealthService:
        """`warden health NAME [--repair]`: checks a workspace folder and repairs it."""
        from warden.adapters.workspace_io import HostWorkspaceIO
        from warden.services.health import HealthService

        def policy_check(record: WorkspaceRecord) -> object:
            return self.sandbox_paths.workspace_policy(record)

        return HealthService(self.workspaces, self.workspaces.folders, self.layers, HostWorkspaceIO(),
                             policy_check=policy_check)

    @cached_property
    def installs(self) -> InstallService:
        """`warden install`: packages added to one workspace, in the sandbox."""
        from warden.adapters.safefs import HostSafeRoots
        from warden.adapters.sandbox.tool_runner import NpmTarballFiles, SandboxedTools
        from warden.adapters.workspace_io import HostWorkspaceIO
        from warden.services.installs import InstallService

        return InstallService(self.workspaces, self.quota, self.audit, lambda: self.runs,
                              tools=SandboxedTools(self.environ), roots=HostSafeRoots(), files=HostWorkspaceIO(),
                              tarballs=NpmTarballFiles(), settings=self.settings,
                              checkpoints=lambda: self.checkpoints)

    @cached_property
    def home_setup(self) -> HomeSetup:
        """`warden init`: the folders, config, registry and keys of $WARDEN_HOME."""
        from warden.adapters.home_files import HostHomeFiles
        from warden.services.settings import HomeSetup

        home = self.home
        folders = [(home.root, 0o700), (home.keys, 0o700), (home.layers, 0o755), (home.archives, 0o700),
                   (home.templates, 0o755), (self.root_dir, 0o755)]
        return HomeSetup(root=home.root, folders=folders, config=home.config, files=HostHomeFiles(home.root),
                         open_registry=lambda: self.registry, keys=lambda: self.local_keystore,
                         audit=lambda: self.audit, clock=self.clock,
                         cluster=(lambda: self.cluster_keys) if self.clustered else None,
                         adopt=lambda: self.local_keystore.existing())

    def keyring_at(self, url: str) -> ClusterKeys:
        """The cluster keyring in the registry at `url` (migrated to this version's schema), read
        with this node's cluster key: what `warden init --join URL` checks before it records `url`."""
        from warden.adapters.cluster_keys import ClusterKeys

        self.home.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = open_database(url, self.home.root, busy_timeout=_busy_timeout(self.environ))
        return ClusterKeys(db, self.home.keys, self.environ, clock=self.clock)

    def reloaded(self) -> App:
        """This home wired again from its config (after `init --join` recorded the registry's URL)."""
        return App(self.home, load_settings(self.home, self.environ), self.environ, self.clock)

    @cached_property
    def leases(self) -> LeaseService:
        """Workspace leases (exclusive for lifecycle changes, shared for runs and writes)."""
        from warden.adapters.processes import HostProcesses
        from warden.services.leases import LeaseService

        return LeaseService(self.registry, HostProcesses(), self.clock, self.node, terminal=self.terminal)

    @cached_property
    def instances(self) -> InstanceService:
        """This node's running Warden processes and their heartbeats; the cluster's nodes (`warden nodes`)."""
        from warden.adapters.processes import HostProcesses
        from warden.services.instances import InstanceService, NodeSettings

        settings = NodeSettings(interval=timedelta(seconds=self.settings.get_seconds("node.heartbeat_interval")),
                                window=timedelta(seconds=self.settings.get_seconds("node.heartbeat_window")))
        return InstanceService(self.registry, self.audit, self.clock, HostProcesses(), self.node, settings,
                               live=lambda: self.live)

    # Set by `warden serve` before it builds anything: what it does, it does for bots, on no terminal.
    serving = False

    @cached_property
    def terminal(self) -> str | None:
        """The terminal this process acts for (`WARDEN_TERMINAL`, else its shell session); None in
        a server, whose requests are bots' (a terminal's lock refuses them all)."""
        if self.serving:
            return None
        from warden.adapters.terminal_id import terminal_id

        return terminal_id(self.environ)

    @cached_property
    def janitor(self) -> JanitorService:
        """The cleanup rules applied on their own (`warden janitor`, and inside `warden serve`)."""
        from warden.core.janitor import JanitorRules
        from warden.services.janitor import JanitorService

        def seconds(key: str) -> timedelta:
            return timedelta(seconds=self.settings.get_seconds(key))

        rules = JanitorRules(idle_after=seconds("cleanup.idle_after"),
                             idle_archive_after=seconds("cleanup.idle_archive_after"),
                             temporary_ttl=seconds("cleanup.temporary_ttl"), bot_ttl=seconds("cleanup.bot_ttl"))
        return JanitorService(registry=self.registry, workspaces=self.workspaces, lifecycle=lambda: self.lifecycle,
                              sweeper=lambda: self.sweeper, approvals=lambda: self.approvals, leases=self.leases,
                              audit=self.audit, clock=self.clock, rules=rules,
                              disk_alert_percent=self.settings.get_int("cleanup.disk_alert_percent"),
                              home=self.home.root, instances=lambda: self.instances)

    @cached_property
    def locks(self) -> LockService:
        """Terminals' locks on workspaces (`warden lock|unlock|takeover|locks`)."""
        from warden.services.locks import LockService

        return LockService(self.leases, self.workspaces, self.audit, self.clock)

    @cached_property
    def quota(self) -> QuotaService:
        """The disk quota of workspaces (workspace.max_disk, max_files, min_free)."""
        from warden.adapters.quota import HostDisk
        from warden.adapters.version_usage import kept_bytes
        from warden.services.quota import QuotaService

        versions = self.home.versions
        return QuotaService(self.settings, self.home.root, HostDisk(), kept=lambda folder: kept_bytes(versions, folder))

    @cached_property
    def _version_store(self) -> HostVersionStore:
        from warden.adapters.versions import HostVersionStore

        return HostVersionStore(self.home.versions)

    @cached_property
    def checkpoints(self) -> CheckpointService:
        """Checkpoints, rollbacks and kept versions (`warden checkpoint|checkpoints|rollback`,
        `warden fs NAME versions|restore`); other features call `checkpoints.create(record, message,
        actor)` before they change a workspace."""
        from warden.services.checkpoints import CheckpointService

        return CheckpointService(self._version_store, self.workspaces, self.audit, self.settings, self.clock,
                                 leases=lambda: self.leases, quota=self.quota)

    @cached_property
    def layers(self) -> LayerService:
        from warden.adapters.envs.host_layers import FileResolutionCache, HostLayerBuilder, HostLayerStore
        from warden.adapters.envs.layer_cache import LayerCache
        from warden.services.layers import LayerService
        from warden.services.templates import TemplateCatalog

        store = HostLayerStore(self.home.layers)
        shared = LayerCache(self.layer_cache) if self.layer_cache is not None else None
        return LayerService(store, HostLayerBuilder(store, self.environ, cache_dir=self.home.cache, shared=shared),
                            FileResolutionCache(self.home.layers / "_resolved"), TemplateCatalog(self.home.templates),
                            self.settings)

    @cached_property
    def lifecycle(self) -> LifecycleService:
        from warden.adapters.processes import HostProcesses
        from warden.adapters.unarchive import HostUnarchiver
        from warden.services.lifecycle import LifecycleService

        return LifecycleService(workspaces=self.workspaces, audit=self.audit, processes=HostProcesses(),
                                health=lambda: self.health, installs=lambda: self.installs,
                                layers=lambda: self.layers, unarchiver=HostUnarchiver(), clock=self.clock)

    @cached_property
    def sweeper(self) -> Sweeper:
        """What crashes left behind, swept (`warden serve` at start, `warden doctor --fix`)."""
        from warden.adapters.gitguard import HostGitGuards
        from warden.adapters.leftovers import HostLeftovers
        from warden.adapters.processes import HostProcesses
        from warden.adapters.sandbox.cgroups import HostCgroups
        from warden.services.runs_in_progress import RunsInProgress
        from warden.services.sweeper import Sweeper

        processes = HostProcesses()
        return Sweeper(registry=self.registry, workspaces=self.workspaces,
                       runs=RunsInProgress(self.audit, processes, self.clock, self.leases.node),
                       layers=lambda: self.layers, processes=processes, cgroups=HostCgroups(),
                       git=HostGitGuards(), leftovers=HostLeftovers(), home=self.home.root,
                       root_dir=self.root_dir, archives=self.home.archives, live=lambda: self.live)

    @cached_property
    def sandbox_paths(self) -> SandboxPaths:
        from warden.adapters.policy_files import HostPolicyFiles
        from warden.adapters.sandbox.mountsrc import HostMountJudge
        from warden.services.sandbox_paths import SandboxPaths

        return SandboxPaths(self.home.sandbox_paths, self.audit, self.clock, files=HostPolicyFiles(),
                            mounts=HostMountJudge(self.shared_state),
                            block_system=self.settings.get_bool("sandbox.block_system_paths"),
                            user_home=self.environ.get("HOME"), warden_home=str(self.home.root),
                            workspaces_root=str(self.root_dir),
                            shared_state=self.shared_state)

    def files(self, workspace: str | WorkspaceRecord, *, actor: str = "user",
              approver: Approver | None = None, session: str | None = None,
              scope: Mapping[str, Zone] | None = None) -> FileService:
        """Safe file operations on one workspace; `approver` None: `ask` zones need a person."""
        from warden.adapters.gitguard import HostGitDefuser
        from warden.adapters.safefs import HostSafeRoots
        from warden.services.files import FileService

        record = self.workspaces.get(workspace) if isinstance(workspace, str) else workspace
        return FileService(record, paths=self.sandbox_paths, audit=self.audit, roots=HostSafeRoots(),
                           git=HostGitDefuser(),
                           max_bytes=self.settings.get_int("sandbox.max_file_size_mb") * 1024 * 1024,
                           actor=actor, approver=approver, session=session, scope=scope,
                           quota=self.quota, leases=self.leases,
                           status_of=self._status_of,
                           versions=self.checkpoints.for_files(record, actor), touch=self.workspaces.touch)

    def _status_of(self, name: str) -> str | None:
        """A workspace's status now (None: not in the registry; the folder then decides)."""
        from warden.core.errors import NotFound

        try:
            return self.workspaces.get(name).status
        except NotFound:
            return None

    @cached_property
    def keystore(self) -> Keystore | ClusterKeys:
        """The pepper and secrets key: files of this home (one machine), or the cluster's (a shared
        registry), checked against the cluster's key here, so every command that touches a token
        or a secret is refused up front on a node whose keys are not the cluster's."""
        if self.clustered:
            keys = self.cluster_keys
            keys.check()
            return keys
        return self.local_keystore

    @cached_property
    def local_keystore(self) -> Keystore:
        """The key files of this home (keys/pepper, keys/master.key, or their environment variables)."""
        from warden.adapters.home_state import key_required
        from warden.adapters.keystore import Keystore

        return Keystore(self.home.keys, self.environ,
                        required=lambda name: key_required(self.home.root, name, lambda: self.registry.db))

    @cached_property
    def cluster_keys(self) -> ClusterKeys:
        """The cluster's keyring in the shared registry, unwrapped with this node's cluster key."""
        from warden.adapters.cluster_keys import ClusterKeys

        return ClusterKeys(self.registry.db, self.home.keys, self.environ, clock=self.clock)

    @cached_property
    def keys(self) -> KeyService:
        """`warden keys`: show and rotate the keys (a cluster's, or this home's)."""
        from warden.services.keys import KeyService

        return KeyService(cluster=self.cluster_keys if self.clustered else None,
                          secrets=lambda: self.secrets, audit=self.audit)

    @cached_property
    def grants(self) -> GrantService:
        from warden.services.grants import GrantService

        return GrantService(self.registry, self.audit, self.keystore, self.workspaces, self.clock,
                            default_ttl=timedelta(seconds=self.settings.get_seconds("grants.default_ttl")),
                            max_ttl=timedelta(seconds=self.settings.get_seconds("grants.max_ttl")),
                            zones_of=lambda record: self.sandbox_paths.zones(record),
                            on_revoke=lambda accessors, actor: self.live.stop_principals(accessors, actor=actor))

    @cached_property
    def secrets(self) -> SecretService:
        from warden.services.secrets import SecretService

        return SecretService(self.registry, self.audit, self.keystore, self.clock)

    @cached_property
    def git(self) -> GitService:
        """`warden git`: the person's git on workspaces, run hardened; changes staged as proposals."""
        from warden.adapters.git import HostGit
        from warden.services.git import GitService

        return GitService(workspaces=self.workspaces, git=HostGit(self.environ), audit=self.audit,
                          secrets=lambda: self.secrets, leases=self.leases,
                          forbidden_roots=[str(self.root_dir)],
                          # A checkpoint before `git pull` changes the working tree (undo: rollback).
                          before_pull=lambda record, actor: self.checkpoints.create(
                              record, "before git pull", actor),
                          room=lambda record: self.quota.check_room(record.name, record.path))

    @cached_property
    def auth(self) -> AuthService:
        from warden.services.auth import AuthService

        return AuthService(self.grants, self.workspaces, self.clock, audit=self.audit,
                           secrets=lambda: self.secrets)

    @cached_property
    def context(self) -> ContextService:
        """This terminal's current workspace and history (`warden ws`, `warden @NAME`)."""
        from warden.adapters.safefs import read_small
        from warden.adapters.terminal_id import terminal_id
        from warden.adapters.terminals import JsonDocs, TerminalFiles
        from warden.core.context import branch_of_head
        from warden.services.context import ContextService

        return ContextService(TerminalFiles(self.home.root / "terminals"), self.workspaces,
                              self.terminal or terminal_id(self.environ),
                              states=JsonDocs(self.home.root / "workspace-state"), clock=self.clock,
                              git_branch=lambda record: branch_of_head(read_small(record.path, ".git/HEAD", 4096)),
                              secret_names=lambda: self.secrets.names(),
                              adopt=lambda folder: self.workspaces.adopt(folder, user_home=self.environ.get("HOME"),
                                                                         warden_home=str(self.home.root)))

    @cached_property
    def approvals(self) -> ApprovalService:
        """Bots' `ask` operations waiting for a person (`warden approvals`, /v1/approvals)."""
        from warden.services.approvals import ApprovalService

        service = ApprovalService(self.registry, self.audit, self.clock, workspaces=self.workspaces,
                               grants=self.grants, files=self.files,
                               zones_of=lambda record: self.sandbox_paths.zones(record),
                               ttl=timedelta(seconds=self.settings.get_seconds("approvals.ttl")),
                               max_pending=self.settings.get_int("approvals.max_pending"),
                               max_bytes=self.settings.get_size("approvals.max_pending_size"),
                               # What a person approved can be undone: a checkpoint comes first.
                               before=lambda record, message, actor: self.checkpoints.create(record, message, actor))
        service.register("git.push", lambda record, _content: self._push_approved(record))
        return service

    def _push_approved(self, record: ApprovalRecord) -> dict[str, object]:
        """A bot's approved push: exactly the commit it asked to push, as that bot."""
        # One look at that one proposal, inside the push (one audit event: git.push).
        return self.git.push(record.workspace, str(record.detail.get("proposal", "")), actor=record.requester,
                             commit=str(record.detail.get("commit", ""))).to_json()

    @cached_property
    def runs(self) -> RunService:
        from warden.adapters.gitguard import HostGitGuards
        from warden.adapters.processes import HostProcesses
        from warden.adapters.safefs import HostSafeRoots
        from warden.adapters.sandbox.host import programs_on_path
        from warden.adapters.sandbox.mountsrc import HostMountSources
        from warden.adapters.sandbox.tools import trust_settings
        from warden.services.runs import RunService, RunSettings
        from warden.services.runs_in_progress import RunsInProgress

        records = RunsInProgress(self.audit, HostProcesses(), self.clock, self.leases.node)
        trust_env, trust_paths = trust_settings(self.environ)
        settings = dataclasses.replace(RunSettings.from_settings(self.settings), trust_env=trust_env,
                                       trust_paths=tuple(trust_paths))
        return RunService(registry=self.registry, audit=self.audit, workspaces=self.workspaces,
                          leases=self.leases, quota=self.quota, paths=self.sandbox_paths, settings=settings,
                          sandbox=self.sandbox_backend.runner(), records=records,
                          git=HostGitGuards(),
                          mounts=HostMountSources(str(self.home.root), str(self.root_dir), self.shared_state),
                          roots=HostSafeRoots(), programs=programs_on_path, live=self._live_sandboxes)

    @cached_property
    def sandbox_backend(self) -> SandboxBackend:
        """The sandbox backend `sandbox.backend` names: bubblewrap, the one runnable today (the
        settings refuse `kubernetes` with a pointer to docs/kubernetes.md)."""
        from warden.adapters.sandbox.bubblewrap import BubblewrapBackend
        from warden.core.errors import Unavailable

        name = self.settings.get_str("sandbox.backend")
        if name != BubblewrapBackend.name:  # a backend the settings know but this version cannot wire
            raise Unavailable(f"sandbox.backend {name!r} is not yet runnable; see docs/kubernetes.md",
                              rule="sandbox.backend")
        return BubblewrapBackend(self.environ, self.home.run)

    def _path_policy(self, record: WorkspaceRecord, session: str | None = None,
                     given: EffectivePaths | None = None) -> str:
        """A digest of what the path policy makes a sandbox of `record` (run with `session`'s
        lists too) mount (live sandboxes compare it with the one they started under); `given`:
        the answer a run's mounts were made from, digested instead of the policy as it is now."""
        from warden.core.live import plan_fingerprint

        effective = given if given is not None else self.sandbox_paths.effective(record, session)
        kept = self._path_digests.get((record.path, session))
        if kept is not None and kept[0] is effective:  # the same answer, kept while its files are unchanged
            return kept[1]
        digest = plan_fingerprint(effective.to_json())
        if len(self._path_digests) >= 256:  # as many as SandboxPaths keeps answers for
            self._path_digests.clear()
        self._path_digests[(record.path, session)] = (effective, digest)
        return digest

    def _stop_live(self, workspace: str, reason: str) -> None:
        """Stop this node's live sandboxes of `workspace` (if any runs here), their processes
        recorded killed with `reason`."""
        live = self._live_sandboxes(False)
        if live is not None:
            live.stop_workspace(workspace, reason=reason, actor="warden")

    def _live_sandboxes(self, needed: bool) -> LiveSandboxService | None:
        """The live sandbox service; unless `needed`, None when this node runs no live sandbox (no
        folder of one in `run/`), so a plain `warden run` imports and asks nothing of them."""
        if not needed:
            try:
                if not any(entry.startswith("sbx_") for entry in os.listdir(self.home.run)):
                    return None
            except OSError:
                return None
        return self.live

    @cached_property
    def live(self) -> LiveSandboxService:
        """Live sandboxes of this node and their background processes (`run --detach`, `ps`, …)."""
        from warden.adapters.gitguard import HostGitGuards
        from warden.adapters.sandbox.host import programs_on_path
        from warden.services.live import LiveSandboxService, LiveSettings

        return LiveSandboxService(registry=self.registry, audit=self.audit,
                                  sandboxes=self.sandbox_backend.live(), clock=self.clock,
                                  node=self.leases.node, settings=LiveSettings.from_settings(self.settings),
                                  git=HostGitGuards(), over_quota=lambda record: self.quota.over(record.name,
                                                                                                 record.path),
                                  path_policy=self._path_policy,
                                  instance=self._instance_id, programs=programs_on_path)

    @cached_property
    def forwards(self) -> ForwardService:
        """Forwards of live sandboxes' ports to the host (`warden forward`)."""
        from warden.core.forwards import allowed_ports
        from warden.services.forwards import ForwardService

        return ForwardService(registry=self.registry, audit=self.audit, live=self.live,
                              ports=allowed_ports(self.settings.get_list("sandbox.forward_ports")))

    def _instance_id(self) -> str | None:
        """The id of this process's registered instance; else that of the instance it acts for (a
        child of the home's daemon: the daemon's); None: neither."""
        current = self.instances.current if "instances" in self.__dict__ else None
        return current.id if current is not None else _acting_for

    @cached_property
    def exec_slots(self) -> HeldSlots:
        """The API's exec slots every server worker of this home sees."""
        from warden.adapters.exec_slots import HeldSlots

        return HeldSlots(self.home.run / "exec-slots")

    @cached_property
    def watching(self) -> WatchService:
        """Watches of workspaces' file changes (`warden watch`, the events stream)."""
        from warden.adapters.watcher import InotifyWatcher
        from warden.services.watching import WatchService, WatchSettings

        watcher = InotifyWatcher(max_folders=self.settings.get_int("watch.max_folders"),
                                 max_total=self.settings.get_int("api.max_watched_folders"))
        return WatchService(workspaces=self.workspaces, watcher=watcher,
                            settings=WatchSettings.from_settings(self.settings))

    @cached_property
    def bot_requests(self) -> BotRequestService:
        """The bot protocol's requests (ask for a workspace, exec, grant), for every front end."""
        from warden.services.bot_requests import BotRequestService, RequestSettings
        return BotRequestService(workspaces=self.workspaces, grants=self.grants, auth=self.auth,
                                 secrets=self.secrets, runs=self.runs, installs=lambda: self.installs,
                                 settings=RequestSettings.from_settings(self.settings), live=lambda: self.live)

    def connect_ahead(self) -> None:
        """Open this process's connection to the home's SQLite registry before its first use (the
        daemon's spare, while it waits); a later `bootstrap` of the same home takes it."""
        from warden.adapters.store.db import connect_ahead, sqlite_path

        path = sqlite_path(self.database_url, self.home.root)
        if path is not None:
            connect_ahead(path)

    def rehearse_run(self, folder: str) -> None:
        """Make once, writing nothing, the registry reads that a person's run in workspace folder
        `folder` starts with (the daemon's spare, while it waits, after `connect_ahead`): SQLite
        has then compiled them on the connection that run adopts (given back here), and Python
        has warmed their code."""
        try:
            with self.registry.transaction(write=False) as tx:
                record = next((r for r in tx.workspaces.list_all() if r.path == folder), None)
                if record is not None:
                    tx.workspaces.get(record.name)
                    tx.leases.read(record.name)
                    tx.runs.of_workspace(record.name)
                    tx.runs.of_node(self.node)
                    tx.sandboxes.of_workspace(record.name)
                    tx.sandboxes.find(self.node, record.name, "user", "none")
                    tx.audit.head()
        finally:
            self.registry.give_back_ahead()

    def close(self) -> None:
        if "registry" in self.__dict__:
            self.registry.close()


# The registered instance this process acts for when it registered none of its own: set in a
# child of the home's daemon (interfaces/cli/daemon.py), never from the environment (which a
# client chooses), so the live sandboxes a `warden run` starts there are the daemon's and are
# stopped if the daemon dies unseen.
_acting_for: str | None = None


def act_for(instance_id: str | None) -> None:
    """From now on this process acts for instance `instance_id` (see `_acting_for`)."""
    global _acting_for
    _acting_for = instance_id


def node_name(environ: Mapping[str, str]) -> str:
    """`WARDEN_NODE`, else the host name; InvalidInput (one line) when it is no safe name."""
    from warden.core.names import check_node_name

    raw = environ.get("WARDEN_NODE")
    if raw is not None:
        return check_node_name(raw)
    return check_node_name(os.uname().nodename, source="host name (set WARDEN_NODE)")


def _busy_timeout(environ: Mapping[str, str]) -> float:
    """WARDEN_DB_BUSY_TIMEOUT: seconds to wait for another process's registry lock (default 30)."""
    from warden.adapters.store.db import BUSY_TIMEOUT
    from warden.core.errors import InvalidInput

    raw = environ.get("WARDEN_DB_BUSY_TIMEOUT")
    if raw is None:
        return BUSY_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise InvalidInput(f"bad WARDEN_DB_BUSY_TIMEOUT {raw!r}: give seconds between 0 and 3600")
    return value


def bootstrap(home: str | os.PathLike[str] | None = None, *,
              environ: Mapping[str, str] | None = None,
              clock: Callable[[], datetime] | None = None) -> App:
    """Read $WARDEN_HOME and its settings, and wire the real adapters."""
    from warden.adapters.home_state import check_owned

    env = dict(os.environ) if environ is None else dict(environ)
    located = Home.locate(home, env)
    found_in = env.get("HOME") if home is None and not env.get("WARDEN_HOME") else None
    check_owned(located.root, found_in)  # before anything in it is read (its config) or made (init's folders)
    # Through a link (~/.warden -> /data/me/warden; /home -> /var/home on some systems) the home is
    # used by its real path, checked above with the link's: a sandbox mounts a folder of the home
    # at the path it is given, which behind a link is not that folder inside the sandbox (`warden
    # create` failed building its layer). A link to a folder not made yet names the folder `init`
    # makes (its mkdir stopped at the link).
    located = Home(Path(os.path.realpath(located.root)))
    return App(located, load_settings(located, env), env, clock or utc_now)


def config_file(home: Home) -> ConfigFile:
    """`home`'s config.toml, for `warden config set` (which must work while another setting is wrong)."""
    from warden.adapters.home_files import HostConfigFile

    return HostConfigFile(home.config)


def warm_host() -> None:
    """Learn once what every sandboxed run asks of this host (where bwrap is and what it can,
    the seccomp filter, the cgroups Warden may use): the home's daemon calls it before it forks
    a child per command, so no child pays for it. /etc is left to each run: its entries change."""
    from warden.adapters.sandbox import cgroups, host, seccomp

    host.bwrap_path()
    host.bwrap_has("--disable-userns")
    host.python3_path()
    host.system_layout()
    host.proc_layout()
    cgroups.detect()
    with suppress(Exception):  # without libseccomp each run says so itself
        seccomp.filter_bpf()
