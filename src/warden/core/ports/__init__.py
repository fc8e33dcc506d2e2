"""The ports: what the services need from the world, as small Protocols.

Services import these, never an adapter; `bootstrap.py` passes the real adapters in, and unit
tests pass the fakes in `tests/support/fakes.py`. A contract suite (tests/contracts/) runs the
same checks against each fake and its real adapter, so a fake cannot drift from the real thing.

The registry is a unit of work: `registry.transaction()` yields one `Tx` whose tables
(`tx.workspaces`, `tx.grants`, …) read and write inside that one transaction, so a change and
its audit event commit together or not at all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warden.core.ports.files import (
        ConfigFile,
        DiskUsage,
        FileEntry,
        HomeFiles,
        KeyFiles,
        MountJudge,
        PolicyFiles,
        QuotaWatch,
        SafeRoots,
        StateDocs,
        TerminalStore,
        WorkspaceRoot,
    )
    from warden.core.ports.git import Credential, GitResult, GitRunner
    from warden.core.ports.live import LiveSandboxes
    from warden.core.ports.registry import (
        ApprovalTable,
        AuditTable,
        BotTable,
        Clock,
        ClusterKeyring,
        GrantTable,
        InstanceTable,
        Keys,
        LeaseTable,
        ProcessTable,
        Registry,
        RunTable,
        SandboxTable,
        SecretTable,
        Tx,
        WorkspaceTable,
    )
    from warden.core.ports.sandbox import (
        GitGuard,
        GitGuards,
        Leftovers,
        MountSources,
        Processes,
        RunCgroups,
        SandboxBackend,
        SandboxRunner,
        Unarchiver,
    )
    from warden.core.ports.versions import Captured, VersionStore
    from warden.core.ports.watch import ChangeFeed, FileWatcher
    from warden.core.ports.workspace import (
        ArchiveFiles,
        GitDefuser,
        LayerBuilder,
        LayerStore,
        NpmTarballs,
        ResolutionCache,
        SandboxTools,
        WorkspaceFolders,
        WorkspaceReads,
    )

__all__ = [
    "ApprovalTable",
    "ArchiveFiles",
    "AuditTable",
    "BotTable",
    "Captured",
    "ChangeFeed",
    "Clock",
    "ClusterKeyring",
    "ConfigFile",
    "Credential",
    "DiskUsage",
    "FileEntry",
    "FileWatcher",
    "GitDefuser",
    "GitGuard",
    "GitGuards",
    "GitResult",
    "GitRunner",
    "GrantTable",
    "HomeFiles",
    "InstanceTable",
    "KeyFiles",
    "Keys",
    "LayerBuilder",
    "LayerStore",
    "LeaseTable",
    "Leftovers",
    "LiveSandboxes",
    "MountJudge",
    "MountSources",
    "NpmTarballs",
    "PolicyFiles",
    "ProcessTable",
    "Processes",
    "QuotaWatch",
    "Registry",
    "ResolutionCache",
    "RunCgroups",
    "RunTable",
    "SafeRoots",
    "SandboxBackend",
    "SandboxRunner",
    "SandboxTable",
    "SandboxTools",
    "SecretTable",
    "StateDocs",
    "TerminalStore",
    "Tx",
    "Unarchiver",
    "VersionStore",
    "WorkspaceFolders",
    "WorkspaceReads",
    "WorkspaceRoot",
    "WorkspaceTable",
]

# Where each port is declared: importing the package loads only the part a caller names, so
# `warden run` does not import the Protocols of layers and files it never touches.
_HOME = {
    "ArchiveFiles": "workspace",
    "ApprovalTable": "registry",
    "AuditTable": "registry",
    "BotTable": "registry",
    "Captured": "versions",
    "ChangeFeed": "watch",
    "Clock": "registry",
    "ClusterKeyring": "registry",
    "ConfigFile": "files",
    "Credential": "git",
    "DiskUsage": "files",
    "FileEntry": "files",
    "FileWatcher": "watch",
    "GitDefuser": "workspace",
    "GitGuard": "sandbox",
    "GitGuards": "sandbox",
    "GitResult": "git",
    "GitRunner": "git",
    "GrantTable": "registry",
    "InstanceTable": "registry",
    "HomeFiles": "files",
    "KeyFiles": "files",
    "Keys": "registry",
    "LayerBuilder": "workspace",
    "LayerStore": "workspace",
    "LeaseTable": "registry",
    "Leftovers": "sandbox",
    "LiveSandboxes": "live",
    "MountJudge": "files",
    "MountSources": "sandbox",
    "NpmTarballs": "workspace",
    "PolicyFiles": "files",
    "ProcessTable": "registry",
    "Processes": "sandbox",
    "QuotaWatch": "files",
    "Registry": "registry",
    "ResolutionCache": "workspace",
    "RunCgroups": "sandbox",
    "RunTable": "registry",
    "SafeRoots": "files",
    "StateDocs": "files",
    "TerminalStore": "files",
    "SandboxBackend": "sandbox",
    "SandboxRunner": "sandbox",
    "SandboxTable": "registry",
    "SandboxTools": "workspace",
    "SecretTable": "registry",
    "Tx": "registry",
    "Unarchiver": "sandbox",
    "VersionStore": "versions",
    "WorkspaceFolders": "workspace",
    "WorkspaceReads": "workspace",
    "WorkspaceRoot": "files",
    "WorkspaceTable": "registry",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'warden.core.ports' has no attribute {name!r}")
    return getattr(importlib.import_module(f"warden.core.ports.{_HOME[name]}"), name)
