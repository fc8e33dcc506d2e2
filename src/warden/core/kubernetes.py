"""The Kubernetes sandbox backend on paper: its manifests, built by pure functions (no I/O).

A design, not yet a runnable backend (docs/kubernetes.md says how it maps Warden onto
kubernetes-sigs/agent-sandbox and what stays in Warden). Every function here turns Warden's own
values — a template, its env layers, the limits of a run, its network policy, a workspace's
zones — into plain dicts of the Kubernetes objects that would carry them:

- `network_policies`: the sandbox namespace's NetworkPolicies (networking.k8s.io/v1): deny all
  by default; a sandbox with network reaches only Warden's egress proxy, which keeps applying
  the domain allowlist of core/network.py (a NetworkPolicy knows addresses, not names);
- `sandbox_template` / `warm_pool` / `sandbox_claim`: a Warden template as an agent-sandbox
  SandboxTemplate (one per template content and network mode), its SandboxWarmPool, and the
  SandboxClaim that takes a warmed sandbox for a temporary workspace (an empty folder);
- `workspace_volume` / `live_sandbox`: a workspace that keeps its files, as a
  PersistentVolumeClaim that outlives sandboxes and the Sandbox of one principal and network
  mode that mounts it (its `ro` zones mounted read-only again over it).

Names and labels are derived, never copied: Warden names allow capitals, `_` and `.`, which
Kubernetes names do not, and every bot-influenced value is hostile. Each object name is a
DNS-1123 label of at most 63 characters: a readable slug plus a hash of the whole input, so two
inputs never share a name. The original names ride in annotations, which take any text.

The tests validate every manifest against the agent-sandbox CRDs and the Kubernetes OpenAPI,
both vendored under tests/schemas/.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from warden.core.errors import InvalidInput
from warden.core.limits import Limits
from warden.core.network import NetworkPolicy
from warden.core.templates import Template
from warden.core.zones import Zone

__all__ = [
    "SANDBOX_API",
    "SANDBOX_EXTENSIONS_API",
    "KubernetesSettings",
    "LayerImage",
    "Networking",
    "live_sandbox",
    "network_policies",
    "networking",
    "object_name",
    "quantity",
    "sandbox_claim",
    "sandbox_template",
    "warm_pool",
    "workspace_volume",
]

SANDBOX_API = "agents.x-k8s.io/v1beta1"
SANDBOX_EXTENSIONS_API = "extensions.agents.x-k8s.io/v1beta1"

Networking = Literal["offline", "proxied"]

# Labels Warden puts on every object and pod it makes; the NetworkPolicies select pods by them.
LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_NETWORK = "warden.dev/network"
LABEL_TEMPLATE = "warden.dev/template"
LABEL_WORKSPACE = "warden.dev/workspace"
ANNOTATION_NAME = "warden.dev/name"
PROXY_LABEL = {"app.kubernetes.io/name": "warden-egress-proxy"}

CONTAINER = "sandbox"
WORKSPACE_VOLUME = "workspace"
SANDBOX_UID = 1000  # the unprivileged user every sandboxed command runs as
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}\Z")  # registry/name[:tag][@digest]


@dataclass(frozen=True)
class KubernetesSettings:
    """Where and how the sandboxes would run; the person's settings, checked on creation."""

    image: str  # the sandbox image: a base system with Warden's supervisor, no packages of a template
    namespace: str = "warden-sandboxes"
    proxy_namespace: str = "warden"  # where Warden's egress proxy runs (label app.kubernetes.io/name)
    proxy_port: int = 3128
    runtime_class: str | None = "gvisor"  # a RuntimeClass of a sandboxing runtime (gVisor, Kata); None: runc
    storage_class: str | None = None  # for workspace volumes; None: the cluster's default
    cpu: str = "1"  # CPU cores one sandbox may use (Warden's own limits count CPU seconds per command)
    warm_sandboxes: int = 0  # sandboxes kept warm per template for temporary workspaces

    def __post_init__(self) -> None:
        if not _IMAGE.match(self.image):
            raise InvalidInput(f"bad sandbox image {self.image!r}: give registry/name:tag or name@sha256:…")
        for label, value in (("namespace", self.namespace), ("proxy namespace", self.proxy_namespace),
                             ("runtime class", self.runtime_class), ("storage class", self.storage_class)):
            if value is not None and not _DNS_LABEL.match(value):
                raise InvalidInput(f"bad {label} {value!r}: use lower-case letters, digits and '-'")
        if not 0 < self.proxy_port < 65536:
            raise InvalidInput(f"bad proxy port {self.proxy_port}: use 1-65535")
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)?|[0-9]+m", self.cpu):
            raise InvalidInput(f"bad CPU amount {self.cpu!r}: give cores (1, 0.5) or millicores (500m)")
        if isinstance(self.warm_sandboxes, bool) or not 0 <= self.warm_sandboxes <= 1000:
            raise InvalidInput(f"bad number of warm sandboxes {self.warm_sandboxes!r}: give 0-1000")


@dataclass(frozen=True)
class LayerImage:
    """A read-only tree a sandbox needs at a fixed path: an env layer or an interpreter prefix,
    published as an OCI image and mounted as an image volume at the path it has on a host (so
    the thin venv's `.pth` and shebangs name the same paths inside and out)."""

    path: str
    reference: str

    def __post_init__(self) -> None:
        _check_path(self.path, "layer path")
        if not _IMAGE.match(self.reference):
            raise InvalidInput(f"bad layer image {self.reference!r}: give registry/name:tag or name@sha256:…")


def _check_path(path: str, what: str) -> None:
    if not path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in path.split("/")[1:]):
        raise InvalidInput(f"bad {what} {path!r}: give an absolute path without '.', '..' or '//'")


def object_name(prefix: str, *parts: str) -> str:
    """A DNS-1123 label (at most 63 characters) for `parts`: `prefix-slug-hash`, the hash over
    every part, so different inputs never meet in one name whatever they spell."""
    digest = hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")
    room = 63 - len(prefix) - len(digest) - 2
    slug = slug[:room].strip("-")
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


def quantity(size: int) -> str:
    """Bytes as a Kubernetes quantity in binary units (`1Gi`; a bare `G` would be 10⁹)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidInput(f"bad size {size!r}: give a positive number of bytes")
    for suffix, factor in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


def networking(network: NetworkPolicy | None) -> Networking:
    """The network mode of a run: none at all, or only through Warden's proxy (whatever it allows)."""
    return "offline" if network is None else "proxied"


def _labels(**extra: str) -> dict[str, str]:
    return {LABEL_MANAGED: "warden", **extra}


def _meta(name: str, settings: KubernetesSettings, labels: Mapping[str, str],
          shown: Mapping[str, str] | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "namespace": settings.namespace, "labels": dict(labels)}
    if shown:
        meta["annotations"] = {f"{ANNOTATION_NAME}.{k}": v for k, v in shown.items()}
    return meta


# -- the namespace ----------------------------------------------------------------------------

def network_policies(settings: KubernetesSettings) -> list[dict[str, object]]:
    """The sandbox namespace's NetworkPolicies: every pod denied all traffic, in and out (a pod
    no policy selects would be open, so the first selects them all); pods labelled `proxied`
    may open TCP connections to Warden's egress proxy and nothing else — not even DNS: the
    proxy resolves names, so a sandbox needs none. Policies add up, so nothing here can widen
    what another allows; Warden's exec goes through the API server (pods/exec), never ingress."""
    deny_all: dict[str, object] = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": _meta("warden-deny-all", settings, _labels()),
                "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}}
    proxied: dict[str, object] = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": _meta("warden-proxied", settings, _labels()),
               "spec": {"podSelector": {"matchLabels": {LABEL_NETWORK: "proxied"}},
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"namespaceSelector": {"matchLabels": {
                                                "kubernetes.io/metadata.name": settings.proxy_namespace}},
                                            "podSelector": {"matchLabels": dict(PROXY_LABEL)}}],
                                    "ports": [{"protocol": "TCP", "port": settings.proxy_port}]}]}}
    return [deny_all, proxied]


# -- the pod ----------------------------------------------------------------------------------

def _pod_template(settings: KubernetesSettings, *, labels: Mapping[str, str], layers: Sequence[LayerImage],
                  limits: Limits, mode: Networking, workspace_path: str, workspace_source: Mapping[str, object],
                  ro_zones: Sequence[Zone] = ()) -> dict[str, object]:
    """The pod of a sandbox: one unprivileged container holding Warden's supervisor, a read-only
    system, the workspace read-write, layers read-only, a private /tmp in memory."""
    _check_path(workspace_path, "workspace path")
    # /tmp is the pod's own memory-backed emptyDir below, private to this sandbox.
    env = [{"name": "HOME", "value": workspace_path}, {"name": "LANG", "value": "C.UTF-8"},
           {"name": "TMPDIR", "value": "/tmp"}]  # noqa: S108
    if mode == "proxied":
        proxy = f"http://warden-egress-proxy.{settings.proxy_namespace}.svc:{settings.proxy_port}"
        env += [{"name": n, "value": proxy} for n in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")]
    mounts: list[dict[str, object]] = [{"name": WORKSPACE_VOLUME, "mountPath": workspace_path},
                                       {"name": "tmp", "mountPath": "/tmp"}]  # noqa: S108
    # A zone is a folder of the workspace: the same volume mounted again, read-only, over it
    # (kubelet opens subPath without following links: CVE-2017-1002101 was that escape).
    for zone in sorted(ro_zones, key=lambda z: z.path):
        mounts.append({"name": WORKSPACE_VOLUME, "mountPath": workspace_path.rstrip("/") + zone.path,
                       "subPath": zone.path.lstrip("/"), "readOnly": True})
    volumes: list[dict[str, object]] = [{"name": WORKSPACE_VOLUME, **workspace_source},
                                        {"name": "tmp", "emptyDir": {"medium": "Memory",
                                                                     "sizeLimit": quantity(limits.memory)}}]
    for index, layer in enumerate(sorted(layers, key=lambda la: la.path)):
        name = f"layer-{index}"
        volumes.append({"name": name, "image": {"reference": layer.reference, "pullPolicy": "IfNotPresent"}})
        mounts.append({"name": name, "mountPath": layer.path, "readOnly": True})
    memory = quantity(limits.memory)
    container = {
        "name": CONTAINER, "image": settings.image, "imagePullPolicy": "IfNotPresent",
        # The supervisor waits for commands; each arrives through pods/exec, with its own rlimits
        # (CPU seconds, processes, open files, file size) and timeout applied before it runs.
        "command": ["/opt/warden/supervisor", "serve"],
        "workingDir": workspace_path, "env": env, "volumeMounts": mounts,
        "resources": {"limits": {"memory": memory, "cpu": settings.cpu},
                      "requests": {"memory": memory, "cpu": settings.cpu}},
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "runAsUser": SANDBOX_UID, "runAsGroup": SANDBOX_UID,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    spec: dict[str, object] = {
        "containers": [container], "volumes": volumes, "restartPolicy": "Never",
        # No Kubernetes credentials, no service variables, nothing of the node in a sandbox.
        "automountServiceAccountToken": False, "enableServiceLinks": False,
        "hostNetwork": False, "hostPID": False, "hostIPC": False, "shareProcessNamespace": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"runAsNonRoot": True, "runAsUser": SANDBOX_UID, "runAsGroup": SANDBOX_UID,
                            "fsGroup": SANDBOX_UID, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if settings.runtime_class is not None:
        spec["runtimeClassName"] = settings.runtime_class
    return {"metadata": {"labels": {**labels, LABEL_NETWORK: mode}}, "spec": spec}


# -- templates: warm sandboxes for temporary workspaces ---------------------------------------

def _template_name(template: Template, mode: Networking) -> str:
    # By content: a changed template is a new SandboxTemplate, so a warm pool never hands out
    # sandboxes of an older version.
    return object_name("warden", template.name, template.digest(), mode)


def sandbox_template(template: Template, *, layers: Sequence[LayerImage], limits: Limits, network: NetworkPolicy | None,
                     settings: KubernetesSettings, workspace_path: str = "/workspace") -> dict[str, object]:
    """A Warden template (and a network mode) as a SandboxTemplate: its layers mounted
    read-only, the workspace an empty folder. Its NetworkPolicy is Warden's own
    (`network_policies`), so the controller is told to manage none (`Unmanaged`); claims may
    neither add variables (secrets reach a command through exec, never the pod) nor volumes."""
    mode = networking(network)
    labels = _labels(**{LABEL_TEMPLATE: object_name("t", template.name)})
    return {
        "apiVersion": SANDBOX_EXTENSIONS_API, "kind": "SandboxTemplate",
        "metadata": _meta(_template_name(template, mode), settings, labels,
                          {"template": template.name, "digest": template.digest()}),
        "spec": {"podTemplate": _pod_template(settings, labels=labels, layers=layers, limits=limits, mode=mode,
                                              workspace_path=workspace_path,
                                              workspace_source={"emptyDir": {}}),
                 "networkPolicyManagement": "Unmanaged",
                 "envVarsInjectionPolicy": "Disallowed",
                 "volumeClaimTemplatesPolicy": "Disallowed"},
    }


def warm_pool(template: Template, *, network: NetworkPolicy | None, settings: KubernetesSettings) -> dict[str, object]:
    """The SandboxWarmPool of a template and network mode (`settings.warm_sandboxes` kept ready);
    `Recreate` replaces warm sandboxes at once when the template changes."""
    name = _template_name(template, networking(network))
    return {"apiVersion": SANDBOX_EXTENSIONS_API, "kind": "SandboxWarmPool",
            "metadata": _meta(name, settings, _labels(), {"template": template.name}),
            "spec": {"replicas": settings.warm_sandboxes, "sandboxTemplateRef": {"name": name},
                     "updateStrategy": {"type": "Recreate"}}}


def sandbox_claim(workspace: str, principal: str, template: Template, *, network: NetworkPolicy | None,
                  settings: KubernetesSettings, shutdown_at: str | None = None) -> dict[str, object]:
    """A temporary workspace's live sandbox, taken warm from its template's pool. `shutdown_at`
    (RFC 3339, UTC) is when the cluster deletes it even if Warden is gone; Warden itself stops
    it sooner when idle (workspace.sandbox_idle)."""
    mode = networking(network)
    lifecycle: dict[str, object] = {"shutdownPolicy": "Delete"}
    if shutdown_at is not None:
        lifecycle["shutdownTime"] = _rfc3339(shutdown_at)
    labels = _labels(**{LABEL_WORKSPACE: object_name("w", workspace)})
    return {"apiVersion": SANDBOX_EXTENSIONS_API, "kind": "SandboxClaim",
            "metadata": _meta(object_name("warden", workspace, principal, mode), settings, labels,
                              {"workspace": workspace, "principal": principal}),
            "spec": {"warmPoolRef": {"name": _template_name(template, mode)}, "lifecycle": lifecycle}}


# -- workspaces that keep their files ---------------------------------------------------------

def workspace_volume(workspace: str, *, disk: int, settings: KubernetesSettings) -> dict[str, object]:
    """The PersistentVolumeClaim holding a workspace's folder, as large as workspace.max_disk;
    Warden's own object, so it outlives every sandbox that mounts it."""
    spec: dict[str, object] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": quantity(disk)}}}
    if settings.storage_class is not None:
        spec["storageClassName"] = settings.storage_class
    labels = _labels(**{LABEL_WORKSPACE: object_name("w", workspace)})
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": _meta(object_name("warden-ws", workspace), settings, labels, {"workspace": workspace}),
            "spec": spec}


def live_sandbox(workspace: str, principal: str, template: Template, *, layers: Sequence[LayerImage],
                 limits: Limits, network: NetworkPolicy | None, zones: Mapping[str, Zone],
                 settings: KubernetesSettings, workspace_path: str,
                 shutdown_at: str | None = None) -> dict[str, object]:
    """The live sandbox of one principal and network mode in a workspace that keeps its files:
    a Sandbox mounting the workspace's volume at `workspace_path` (the folder's path on a node,
    so its thin venv works unchanged) and each `ro` zone read-only over it. Never pooled: a
    running pod cannot gain a volume, so this one starts cold."""
    mode = networking(network)
    labels = _labels(**{LABEL_WORKSPACE: object_name("w", workspace),
                        LABEL_TEMPLATE: object_name("t", template.name)})
    source = {"persistentVolumeClaim": {"claimName": object_name("warden-ws", workspace)}}
    spec: dict[str, object] = {
        "podTemplate": _pod_template(settings, labels=labels, layers=layers, limits=limits, mode=mode,
                                     workspace_path=workspace_path, workspace_source=source,
                                     ro_zones=[z for z in zones.values() if z.mode == "ro"]),
        "shutdownPolicy": "Delete",
    }
    if shutdown_at is not None:
        spec["shutdownTime"] = _rfc3339(shutdown_at)
    return {"apiVersion": SANDBOX_API, "kind": "Sandbox",
            "metadata": _meta(object_name("warden", workspace, principal, mode), settings, labels,
                              {"workspace": workspace, "principal": principal, "template": template.name}),
            "spec": spec}


_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)\Z")


def _rfc3339(text: str) -> str:
    if not _RFC3339.match(text):
        raise InvalidInput(f"bad shutdown time {text!r}: give RFC 3339, e.g. 2026-01-31T12:00:00Z")
    return text
