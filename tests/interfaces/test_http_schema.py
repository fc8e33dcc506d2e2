"""schemathesis against the live /openapi.json: generated requests (valid and invalid) never get
a 5xx, and every response matches the documented status codes, content types and schemas.

Bounded: a few examples per operation, so the whole module stays well under a minute.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.servers import ThreadServer
from warden.bootstrap import bootstrap

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, negative_data_rejection]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home: Path = tmp_path_factory.mktemp("schema") / "home"
    environ = {"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home),
               "WARDEN_API_REQUEST_TIMEOUT": "20s", "WARDEN_SANDBOX_TIMEOUT": "5s"}
    app = bootstrap(home, environ=environ)
    app.workspaces.create("demo")
    app.files("demo", actor="user").write_bytes("/notes/a.txt", b"hello")
    identity = app.grants.register_bot("fuzzbot").token
    grant = app.grants.grant("demo", "fuzzbot", "read,write,execute,admin").token
    with ThreadServer(app) as server:
        yield {"url": server.url, "identity": identity, "grant": grant, "app": app}
    app.close()


@pytest.fixture(scope="module")
def api_schema(live: dict[str, Any]) -> Any:
    schema = schemathesis.openapi.from_url(live["url"] + "/openapi.json")
    # An invalid query can be a URL over the server's limit: 414 rejects it as well as 422 does.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "414"]
    return schema


OPERATIONS = [("GET", "/v1/health"), ("GET", "/v1/whoami"), ("POST", "/v1/workspaces"),
              ("GET", "/v1/workspaces"), ("GET", "/v1/workspaces/{name}"), ("DELETE", "/v1/workspaces/{name}"),
              ("POST", "/v1/workspaces/{name}/exec"), ("GET", "/v1/workspaces/{name}/files"),
              ("DELETE", "/v1/workspaces/{name}/files"), ("GET", "/v1/workspaces/{name}/files/content"),
              ("PUT", "/v1/workspaces/{name}/files/content"), ("POST", "/v1/workspaces/{name}/grants"),
              ("DELETE", "/v1/workspaces/{name}/grants/{accessor}")]


# The pytest plugin's lazy loader does not run on this pytest (9.x: `Function._nodeid`), so the
# generated cases are driven with Hypothesis directly: same strategies, same checks.
@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_api_conforms_to_its_schema(api_schema: Any, live: dict[str, Any], method: str, path: str,
                                    mode: str) -> None:
    operation = api_schema[path][method]
    if mode == "negative" and not (operation.body or operation.query or operation.path_parameters):
        pytest.skip("nothing to make invalid")
    # Seed 000's workspace request takes the bot's identity token; everything else a grant token.
    token = live["identity"] if (method, path) == ("POST", "/v1/workspaces") else live["grant"]
    generation = GenerationMode(mode)
    # Random names and paths mostly meet 403 and 404; also aim at the real workspace and file so
    # the success paths are generated too (but never destroy the workspace under test).
    known: dict[str, Any] = {}
    if "{name}" in path and (method, path) != ("DELETE", "/v1/workspaces/{name}"):
        known["path_parameters"] = {"name": "demo"}
    if operation.query:
        known["query"] = {"path": "/notes/a.txt"}
    strategies = [operation.as_strategy(generation_mode=generation)]
    if known and mode == "positive":
        strategies.append(operation.as_strategy(generation_mode=generation, **known))
        if "path_parameters" in known:
            strategies.append(operation.as_strategy(generation_mode=generation,
                                                    path_parameters=known["path_parameters"]))
    strategy = st.one_of(strategies)

    @given(case=strategy)
    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: Any) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS, timeout=60)

    check()


def test_the_schema_documents_every_route_and_the_error_envelope(live: dict[str, Any]) -> None:
    import httpx

    doc = httpx.get(live["url"] + "/openapi.json", timeout=60).json()
    paths = doc["paths"]
    assert {"/v1/health", "/v1/workspaces", "/v1/workspaces/{name}", "/v1/workspaces/{name}/exec",
            "/v1/workspaces/{name}/files", "/v1/workspaces/{name}/files/content",
            "/v1/workspaces/{name}/grants", "/v1/workspaces/{name}/grants/{accessor}"} <= set(paths)
    responses = paths["/v1/workspaces/{name}/exec"]["post"]["responses"]
    for status in ("400", "401", "403", "404", "409", "413", "422", "423", "503"):
        assert responses[status]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert "bearer" in str(doc["components"]["securitySchemes"]).lower()
