"""The API's documentation as a person or a client reads it: /docs works offline (Swagger UI's
script and style come from this server), and /openapi.json lists the errors each route can
really answer, with examples of every error and request body."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from tests.support.servers import ThreadServer
from warden.bootstrap import bootstrap
from warden.interfaces.http.openapi import REQUEST_EXAMPLES
from warden.interfaces.http.statuses import HTTP_STATUS


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home: Path = tmp_path_factory.mktemp("docs") / "home"
    app = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home)})
    with ThreadServer(app) as server:
        yield {"url": server.url, "app": app, "schema": httpx.get(server.url + "/openapi.json", timeout=60).json()}
    app.close()


def test_docs_page_loads_its_script_and_style_from_this_server(live: dict[str, Any]) -> None:
    page = httpx.get(live["url"] + "/docs")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    # Every URL the page loads is this server's own: nothing from a CDN (blank offline).
    sources = re.findall(r"""(?:src|href)\s*[=:]\s*['"]([^'"]+)['"]""", page.text)
    assert sources, page.text
    assert not [s for s in sources if "//" in s], sources
    assert "cdn" not in page.text.lower()
    for asset, kind in ((".js", "javascript"), (".css", "text/css")):
        url = next(s for s in sources if s.endswith(asset))
        got = httpx.get(live["url"] + url)
        assert got.status_code == 200, url
        assert kind in got.headers["content-type"]
        assert len(got.content) > 10_000  # the real bundle, not an error page
    assert "/openapi.json" in page.text


def _operations(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method, path): op for path, ops in schema["paths"].items() for method, op in ops.items()}


def _errors(operation: dict[str, Any]) -> set[int]:
    return {int(s) for s in operation["responses"] if s.isdigit() and int(s) >= 400}


def test_each_route_lists_the_errors_it_can_answer(live: dict[str, Any]) -> None:
    ops = _operations(live["schema"])
    # Not one blanket list for every route.
    assert len({frozenset(_errors(op)) for op in ops.values()}) >= 4
    assert not _errors(ops["get", "/v1/health"])  # no token, no parameters: nothing to refuse
    listing = _errors(ops["get", "/v1/workspaces"])
    assert {401, 403} <= listing
    assert not listing & {404, 409, 413, 422}  # nothing named, nothing sent, nothing changed
    assert {400, 401, 403, 404, 409, 413, 422, 423, 503} <= _errors(ops["post", "/v1/workspaces/{name}/exec"])
    assert 409 not in _errors(ops["get", "/v1/workspaces/{name}"])
    assert 404 not in _errors(ops["post", "/v1/workspaces"])  # creating names nothing that exists
    assert 431 not in set().union(*map(_errors, ops.values()))  # said once, in the description
    assert "431" in live["schema"]["info"]["description"]


def test_every_error_response_has_an_example_with_its_code(live: dict[str, Any]) -> None:
    for (method, path), op in _operations(live["schema"]).items():
        for status in _errors(op):
            media = op["responses"][str(status)]["content"]["application/json"]
            assert media["schema"]["$ref"].endswith("/ErrorBody")
            error = media["example"]["error"]
            assert error["message"], (method, path, status)
            if status not in (401, 413, 414, 422):  # statuses of their own; the rest follow the table
                assert HTTP_STATUS[error["code"]] == status, (method, path, status)


def test_every_request_body_has_an_example_its_route_accepts(live: dict[str, Any]) -> None:
    ops = _operations(live["schema"])
    with_body = {key for key, op in ops.items() if "requestBody" in op}
    assert with_body == set(REQUEST_EXAMPLES)
    for key in with_body:
        media = ops[key]["requestBody"]["content"]
        assert all("example" in m for m in media.values()), key
    # Each example validated by the model its schema names (the route's own request model).
    from warden.interfaces.http import checkpoints, git, models

    named = {name: obj for module in (models, git, checkpoints) for name, obj in vars(module).items()
             if isinstance(obj, type) and issubclass(obj, BaseModel)}
    checked = 0
    for key, example in REQUEST_EXAMPLES.items():
        schema = ops[key]["requestBody"]["content"].get("application/json", {}).get("schema", {})
        if "$ref" not in schema:
            continue  # a raw body (a file's bytes)
        named[schema["$ref"].rsplit("/", 1)[1]].model_validate(example)
        checked += 1
    assert checked >= 8
