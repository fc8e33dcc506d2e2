"""The Kubernetes backend's manifests against the real schemas (tests/schemas/README.md).

Every generated object is validated against the agent-sandbox CRD of its kind (its storage
version's openAPIV3Schema) and, for the pieces Kubernetes itself defines (PodSpec,
NetworkPolicy, PersistentVolumeClaim, ObjectMeta), against the Kubernetes OpenAPI, both closed
to unknown fields as `kubectl apply --validate=strict` is. The negative tests change one field
of a valid manifest and must see it refused.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import warden
from warden.core import kubernetes as k8s
from warden.core.errors import InvalidInput
from warden.core.limits import Limits
from warden.core.network import NetworkPolicy
from warden.core.templates import Template, parse_template
from warden.core.zones import Zone

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
BUNDLED = Path(warden.__file__).parent / "templates"
CRDS = {
    "Sandbox": "agents.x-k8s.io_sandboxes.yaml",
    "SandboxTemplate": "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
    "SandboxClaim": "extensions.agents.x-k8s.io_sandboxclaims.yaml",
    "SandboxWarmPool": "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
}
BUILT_IN = {"NetworkPolicy": "io.k8s.api.networking.v1.NetworkPolicy",
            "PersistentVolumeClaim": "io.k8s.api.core.v1.PersistentVolumeClaim"}
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
QUALIFIED = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")


# -- the schemas ------------------------------------------------------------------------------

def _closed(node: Any) -> Any:
    """`node` with every object schema that lists properties closed to others (a copy)."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _closed(value) for key, value in node.items()}
    if ("properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def _crd(kind: str) -> dict[str, Any]:
    return yaml.safe_load((SCHEMAS / "agent-sandbox" / CRDS[kind]).read_text())


def _crd_schema(kind: str, *, strict: bool = True) -> dict[str, Any]:
    crd = _crd(kind)
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema = version["schema"]["openAPIV3Schema"]
    return _closed(schema) if strict else schema


def _crd_api_version(kind: str) -> str:
    crd = _crd(kind)
    (version,) = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
    return f"{crd['spec']['group']}/{version}"


@cache
def _definitions() -> dict[str, Any]:
    defs = json.loads((SCHEMAS / "kubernetes" / "swagger.json").read_text())["definitions"]
    # OpenAPI v2 spells IntOrString as a string of format int-or-string; the API takes either.
    defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    return _closed(defs)


# The API server checks `format: date-time` (RFC 3339); jsonschema does only with an optional
# package, so the check is spelled out here.
FORMATS = jsonschema.FormatChecker(formats=())


@FORMATS.checks("date-time")
def _is_date_time(value: object) -> bool:
    return not isinstance(value, str) or re.fullmatch(
        r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", value) is not None


@cache
def _openapi_validator(definition: str) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator({"$ref": f"#/definitions/{definition}", "definitions": _definitions()},
                                      format_checker=FORMATS)


@cache
def _crd_validator(kind: str, strict: bool) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_crd_schema(kind, strict=strict), format_checker=FORMATS)


def _openapi_errors(definition: str, instance: object) -> list[str]:
    found = _openapi_validator(definition).iter_errors(instance)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


def _crd_errors(kind: str, instance: object, *, strict: bool = True) -> list[str]:
    found = _crd_validator(kind, strict).iter_errors(instance)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


def problems(manifest: dict[str, Any]) -> list[str]:
    """Everything the schemas (and the API server's name rules) refuse in `manifest`."""
    kind = manifest.get("kind")
    found: list[str] = []
    if kind in CRDS:
        if manifest.get("apiVersion") != _crd_api_version(kind):
            found.append(f"apiVersion {manifest.get('apiVersion')!r} is not {_crd_api_version(kind)!r}")
        found += _crd_errors(kind, manifest)
        pod = manifest.get("spec", {}).get("podTemplate")
        if pod is not None:  # the pod template is Kubernetes' own type: check it by its own schema too
            found += [f"podTemplate: {e}" for e in _openapi_errors("io.k8s.api.core.v1.PodTemplateSpec", pod)]
    elif kind in BUILT_IN:
        (gvk,) = _definitions()[BUILT_IN[kind]]["x-kubernetes-group-version-kind"]
        want = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
        if manifest.get("apiVersion") != want:
            found.append(f"apiVersion {manifest.get('apiVersion')!r} is not {want!r}")
        found += _openapi_errors(BUILT_IN[kind], manifest)
    else:
        return [f"unknown kind {kind!r}"]
    meta = manifest.get("metadata", {})
    found += [f"metadata: {e}" for e in _openapi_errors("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", meta)]
    name = meta.get("name", "")
    if not (isinstance(name, str) and len(name) <= 63 and DNS_LABEL.match(name)):
        found.append(f"name {name!r} is not a DNS-1123 label")
    for labels in _all_labels(manifest):
        for key, value in labels.items():
            if not QUALIFIED.match(key) or not (isinstance(value, str) and len(value) <= 63
                                                and LABEL_VALUE.match(value)):
                found.append(f"label {key}={value!r} is not valid")
    for key in (meta.get("annotations") or {}):
        if not QUALIFIED.match(key):
            found.append(f"annotation key {key!r} is not valid")
    return found


def _all_labels(node: object) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("labels", "matchLabels") and isinstance(value, dict):
                yield value
            else:
                yield from _all_labels(value)
    elif isinstance(node, list):
        for item in node:
            yield from _all_labels(item)


# -- what is generated ------------------------------------------------------------------------

SETTINGS = k8s.KubernetesSettings(image="registry.example/warden/sandbox:1.0", warm_sandboxes=2,
                                  storage_class="fast-ssd")
LAYERS = (k8s.LayerImage("/srv/warden/layers/py-3f2a", "registry.example/warden/layer@sha256:" + "a" * 64),
          k8s.LayerImage("/srv/warden/python/cpython-3.12", "registry.example/warden/cpython:3.12"))
LIMITS = Limits(memory=512 * 1024 * 1024)
ZONES = {"data": Zone("data", "/data", "ro"), "out": Zone("out", "/out", "rw"),
         "docs": Zone("docs", "/docs/ref", "ro")}
NETWORKS = {"offline": None, "proxied": NetworkPolicy.parse(["pypi.org:443", "*.github.com"])}
HOSTILE = ["demo", "My_Work.space-", "x" * 63, "ünïcode/../../etc", "", "--", "a" * 500]


def _template(name: str) -> Template:
    return parse_template((BUNDLED / f"{name}.yaml").read_text(), f"{name}.yaml")


def _every_manifest() -> Iterator[tuple[str, dict[str, Any]]]:
    for manifest in k8s.network_policies(SETTINGS):
        yield f"namespace/{manifest['metadata']['name']}", manifest
    for name in ("default", "data-science", "web-dev", "minimal"):
        template = _template(name)
        for mode, network in NETWORKS.items():
            yield f"{name}/{mode}/template", k8s.sandbox_template(template, layers=LAYERS, limits=LIMITS,
                                                                 network=network, settings=SETTINGS)
            yield f"{name}/{mode}/pool", k8s.warm_pool(template, network=network, settings=SETTINGS)
    template = _template("default")
    for workspace in HOSTILE:
        for mode, network in NETWORKS.items():
            yield f"{workspace[:20]!r}/{mode}/claim", k8s.sandbox_claim(
                workspace, "grant:wdn_abc", template, network=network, settings=SETTINGS,
                shutdown_at="2026-01-31T12:00:00Z")
            yield f"{workspace[:20]!r}/{mode}/sandbox", k8s.live_sandbox(
                workspace, "person", template, layers=LAYERS, limits=LIMITS, network=network, zones=ZONES,
                settings=SETTINGS, workspace_path="/srv/warden/workspaces/demo", shutdown_at="2026-01-31T12:00:00Z")
        yield f"{workspace[:20]!r}/volume", k8s.workspace_volume(workspace, disk=10 << 30, settings=SETTINGS)


ALL = list(_every_manifest())


@pytest.mark.parametrize(("label", "manifest"), ALL, ids=[label for label, _ in ALL])
def test_every_generated_manifest_is_valid(label: str, manifest: dict[str, Any]) -> None:
    assert problems(manifest) == []


def test_every_kind_is_generated_and_checked() -> None:
    assert {m["kind"] for _, m in ALL} == set(CRDS) | set(BUILT_IN)


def test_the_schemas_are_the_vendored_ones() -> None:
    """The CRDs are agent-sandbox's v1beta1 storage versions; the OpenAPI knows every PodSpec
    field those CRDs embed (so both come from one era of Kubernetes)."""
    assert {_crd_api_version(kind) for kind in CRDS} == {k8s.SANDBOX_API, k8s.SANDBOX_EXTENSIONS_API}
    embedded = _crd_schema("Sandbox", strict=False)["properties"]["spec"]["properties"]["podTemplate"]
    fields = set(embedded["properties"]["spec"]["properties"])
    assert fields == set(_definitions()["io.k8s.api.core.v1.PodSpec"]["properties"])


# -- one wrong field must fail ---------------------------------------------------------------

def _first(kind: str, mode: str = "offline") -> dict[str, Any]:
    for label, manifest in ALL:
        if manifest["kind"] == kind and (kind not in ("Sandbox", "SandboxTemplate") or f"/{mode}/" in label):
            return copy.deepcopy(manifest)
    raise AssertionError(kind)


def _container(m: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = m["spec"]["podTemplate"]["spec"]["containers"][0]
    return container


def _rename(node: dict[str, Any], old: str, new: str) -> None:
    node[new] = node.pop(old)


BROKEN: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "Sandbox spec.podTemplate misspelled": (
        "Sandbox", lambda m: _rename(m["spec"], "podTemplate", "podTemplates")),
    "container volumeMounts misspelled": ("Sandbox", lambda m: _rename(_container(m), "volumeMounts", "volumeMount")),
    "container runAsNonRoot as text": (
        "SandboxTemplate", lambda m: _container(m)["securityContext"].update(runAsNonRoot="true")),
    "pod automountServiceAccountToken as text": (
        "Sandbox", lambda m: m["spec"]["podTemplate"]["spec"].update(automountServiceAccountToken="false")),
    "pod runtimeClassName misspelled": (
        "SandboxTemplate", lambda m: _rename(m["spec"]["podTemplate"]["spec"], "runtimeClassName", "runtimeClass")),
    "image volume reference misspelled": (
        "Sandbox", lambda m: _rename(m["spec"]["podTemplate"]["spec"]["volumes"][2]["image"], "reference", "ref")),
    "mount readOnly as text": ("Sandbox", lambda m: _container(m)["volumeMounts"][2].update(readOnly="yes")),
    "template networkPolicyManagement not an allowed value": (
        "SandboxTemplate", lambda m: m["spec"].update(networkPolicyManagement="unmanaged")),
    "claim warmPoolRef misspelled": ("SandboxClaim", lambda m: _rename(m["spec"], "warmPoolRef", "warmpoolRef")),
    "claim shutdownTime not a time": (
        "SandboxClaim", lambda m: m["spec"]["lifecycle"].update(shutdownTime="tomorrow")),
    "pool replicas negative": ("SandboxWarmPool", lambda m: m["spec"].update(replicas=-1)),
    "pool replicas as text": ("SandboxWarmPool", lambda m: m["spec"].update(replicas="2")),
    "NetworkPolicy policyTypes misspelled": (
        "NetworkPolicy", lambda m: _rename(m["spec"], "policyTypes", "policyType")),
    "NetworkPolicy podSelector a list": ("NetworkPolicy", lambda m: m["spec"].update(podSelector=[])),
    "PVC accessModes a string": (
        "PersistentVolumeClaim", lambda m: m["spec"].update(accessModes="ReadWriteOnce")),
    "PVC resources misspelled": ("PersistentVolumeClaim", lambda m: _rename(m["spec"], "resources", "resource")),
    "metadata labels misspelled": ("SandboxClaim", lambda m: _rename(m["metadata"], "labels", "label")),
    "apiVersion of an older version": ("Sandbox", lambda m: m.update(apiVersion="agents.x-k8s.io/v1alpha1")),
    "name not a DNS label": ("PersistentVolumeClaim", lambda m: m["metadata"].update(name="Warden_WS")),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_one_wrong_field_is_refused(case: str) -> None:
    kind, breaks = BROKEN[case]
    manifest = _first(kind)
    assert problems(manifest) == []
    breaks(manifest)
    assert problems(manifest), f"{case}: the schemas let it through"


def test_a_misspelled_field_fails_only_because_the_schema_is_closed() -> None:
    """The published schemas leave objects open (the API server prunes unknown fields); the
    tests close them, and that is what catches a misspelling."""
    manifest = _first("Sandbox")
    _rename(_container(manifest), "volumeMounts", "volumeMount")
    assert _crd_errors("Sandbox", manifest, strict=False) == []
    assert _crd_errors("Sandbox", manifest)


# -- what the manifests say -------------------------------------------------------------------

def _pod_spec(m: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = m["spec"]["podTemplate"]["spec"]
    return spec


def test_the_namespace_denies_everything_but_the_proxy() -> None:
    deny_all, proxied = k8s.network_policies(SETTINGS)
    assert deny_all["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}
    assert proxied["spec"]["podSelector"] == {"matchLabels": {"warden.dev/network": "proxied"}}
    assert proxied["spec"]["policyTypes"] == ["Egress"]
    (rule,) = proxied["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 3128}]
    assert rule["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "warden"}},
                           "podSelector": {"matchLabels": {"app.kubernetes.io/name": "warden-egress-proxy"}}}]


@pytest.mark.parametrize("mode", ["offline", "proxied"])
def test_a_sandbox_pod_is_labelled_with_its_network_and_knows_the_proxy_only_when_proxied(mode: str) -> None:
    for kind in ("Sandbox", "SandboxTemplate"):
        manifest = _first(kind, mode)
        assert manifest["spec"]["podTemplate"]["metadata"]["labels"]["warden.dev/network"] == mode
        names = {e["name"] for e in _container(manifest)["env"]}
        assert ("HTTPS_PROXY" in names) == (mode == "proxied")


def test_the_pod_is_locked_down() -> None:
    for kind in ("Sandbox", "SandboxTemplate"):
        spec = _pod_spec(_first(kind))
        assert spec["automountServiceAccountToken"] is False
        assert spec["enableServiceLinks"] is False
        assert spec["runtimeClassName"] == "gvisor"
        (container,) = spec["containers"]
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["runAsNonRoot"] is True
        assert container["resources"]["limits"]["memory"] == "512Mi"


def test_the_template_leaves_no_door_for_claims() -> None:
    spec = _first("SandboxTemplate")["spec"]
    assert spec["networkPolicyManagement"] == "Unmanaged"  # Warden's own policies apply
    assert spec["envVarsInjectionPolicy"] == "Disallowed"  # secrets go through exec, never the pod
    assert spec["volumeClaimTemplatesPolicy"] == "Disallowed"


def test_ro_zones_are_mounted_read_only_over_the_workspace_and_rw_zones_are_not_mounted() -> None:
    mounts = _container(_first("Sandbox"))["volumeMounts"]
    zones = [m for m in mounts if "subPath" in m]
    assert zones == [
        {"name": "workspace", "mountPath": "/srv/warden/workspaces/demo/data", "subPath": "data", "readOnly": True},
        {"name": "workspace", "mountPath": "/srv/warden/workspaces/demo/docs/ref", "subPath": "docs/ref",
         "readOnly": True}]
    assert {"name": "workspace", "mountPath": "/srv/warden/workspaces/demo"} in mounts


def test_layers_are_read_only_image_volumes_at_their_host_paths() -> None:
    spec = _pod_spec(_first("SandboxTemplate"))
    images = {v["name"]: v["image"]["reference"] for v in spec["volumes"] if "image" in v}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert sorted(images.values()) == sorted(layer.reference for layer in LAYERS)
    assert {mounts[n]["mountPath"] for n in images} == {layer.path for layer in LAYERS}
    assert all(mounts[n]["readOnly"] is True for n in images)


def test_a_sandbox_mounts_its_workspace_volume_and_a_claim_takes_its_template_pool() -> None:
    template = _template("default")
    volume = k8s.workspace_volume("demo", disk=10 << 30, settings=SETTINGS)
    sandbox = k8s.live_sandbox("demo", "person", template, layers=(), limits=LIMITS, network=None, zones={},
                               settings=SETTINGS, workspace_path="/w/demo")
    (ws,) = [v for v in _pod_spec(sandbox)["volumes"] if v["name"] == "workspace"]
    assert ws["persistentVolumeClaim"]["claimName"] == volume["metadata"]["name"]
    assert volume["spec"]["resources"]["requests"]["storage"] == "10Gi"
    claim = k8s.sandbox_claim("demo", "person", template, network=None, settings=SETTINGS)
    pool = k8s.warm_pool(template, network=None, settings=SETTINGS)
    tmpl = k8s.sandbox_template(template, layers=(), limits=LIMITS, network=None, settings=SETTINGS)
    assert claim["spec"]["warmPoolRef"]["name"] == pool["metadata"]["name"] == tmpl["metadata"]["name"]
    assert pool["spec"]["sandboxTemplateRef"]["name"] == tmpl["metadata"]["name"]


def test_names_differ_by_principal_network_and_template_content() -> None:
    template = _template("default")
    names = {k8s.sandbox_claim("demo", who, template, network=net, settings=SETTINGS)["metadata"]["name"]
             for who in ("person", "grant:a") for net in NETWORKS.values()}
    assert len(names) == 4
    changed = Template(**{**template.__dict__, "version": "2.0"})
    assert (k8s.warm_pool(changed, network=None, settings=SETTINGS)["metadata"]["name"]
            != k8s.warm_pool(template, network=None, settings=SETTINGS)["metadata"]["name"])


@given(st.lists(st.text(max_size=80), min_size=1, max_size=3), st.lists(st.text(max_size=80), min_size=1, max_size=3))
def test_object_names_are_dns_labels_and_never_shared(a: list[str], b: list[str]) -> None:
    first, second = k8s.object_name("warden", *a), k8s.object_name("warden", *b)
    for name in (first, second):
        assert len(name) <= 63 and DNS_LABEL.match(name)
    assert (first == second) == (a == b)


def test_quantities_are_binary_units() -> None:
    assert [k8s.quantity(n) for n in (1 << 30, 1536 << 10, 100, 3 << 40)] == ["1Gi", "1536Ki", "100", "3Ti"]
    with pytest.raises(InvalidInput):
        k8s.quantity(0)


@pytest.mark.parametrize(("field", "value"), [
    ("image", "registry.example/x y"), ("namespace", "Warden"), ("runtime_class", "a_b"),
    ("proxy_port", 0), ("cpu", "lots"), ("warm_sandboxes", -1)])
def test_bad_settings_are_refused(field: str, value: object) -> None:
    with pytest.raises(InvalidInput):
        k8s.KubernetesSettings(**{"image": "registry.example/warden/sandbox:1.0", field: value})


@pytest.mark.parametrize(("path", "reference"), [("relative", "r/x:1"), ("/a/../b", "r/x:1"), ("/a", "bad ref")])
def test_bad_layers_are_refused(path: str, reference: str) -> None:
    with pytest.raises(InvalidInput):
        k8s.LayerImage(path, reference)


def test_a_bad_shutdown_time_is_refused() -> None:
    with pytest.raises(InvalidInput):
        k8s.sandbox_claim("demo", "person", _template("minimal"), network=None, settings=SETTINGS,
                          shutdown_at="next tuesday")
