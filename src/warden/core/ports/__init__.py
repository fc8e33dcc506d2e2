"""The ports: what the services need from the world, as small Protocols.

Services import these, never an adapter; `bootstrap.py` passes the real adapters in, and unit
tests pass the fakes in `tests/support/fakes.py`. A contract suite (tests/contracts/) runs the
same checks against each fake and its real adapter, so a fake cannot drift from the real thing.

The registry is a unit of work: `registry.transaction()` yields one `Tx` whose tables
(`tx.workspaces`, `tx.grants`, …) read and write inside that one transaction, so a change and
its audit event commit together or not at all.
"""

from __future__ import annotations

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
    WorkspaceRoot,
)
from warden.core.ports.registry import (
    AuditTable,
    BotTable,
    Clock,
    GrantTable,
    Keys,
    LeaseTable,
    Registry,
    RunTable,
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
    SandboxRunner,
    Unarchiver,
)
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
    "ArchiveFiles",
    "AuditTable",
    "BotTable",
    "Clock",
    "ConfigFile",
    "DiskUsage",
    "FileEntry",
    "GitDefuser",
    "GitGuard",
    "GitGuards",
    "GrantTable",
    "HomeFiles",
    "KeyFiles",
    "Keys",
    "LayerBuilder",
    "LayerStore",
    "LeaseTable",
    "Leftovers",
    "MountJudge",
    "MountSources",
    "NpmTarballs",
    "PolicyFiles",
    "Processes",
    "QuotaWatch",
    "Registry",
    "ResolutionCache",
    "RunCgroups",
    "RunTable",
    "SafeRoots",
    "SandboxRunner",
    "SandboxTools",
    "SecretTable",
    "Tx",
    "Unarchiver",
    "WorkspaceFolders",
    "WorkspaceReads",
    "WorkspaceRoot",
    "WorkspaceTable",
]
