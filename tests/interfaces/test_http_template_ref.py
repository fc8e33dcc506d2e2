"""A bot may name a template, never a file: a YAML it wrote would become a layer built on the host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.servers import ThreadServer
from warden.bootstrap import App


def test_bot_cannot_name_a_template_file(app: App, home: Path, environ: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "warden", "bot", "register", "b1"], env=environ,
                          capture_output=True, check=True)
    token = proc.stdout.decode().strip()
    evil = home.parent / "evil.yaml"
    evil.write_text('version: "1.0"\nname: evil\npython:\n  dependencies: ["evil-sdist"]\n')
    with ThreadServer(app) as server:
        for ref in (str(evil), "../evil.yaml", "evil.yml"):
            body = {"bot": "b1", "request": "workspace", "params": {"name": "w1", "template": ref}}
            response = httpx.post(server.url + "/v1/workspaces", json=body,
                                  headers={"Authorization": f"Bearer {token}"}, timeout=30)
            assert response.status_code in (400, 422), response.text
            assert response.json()["error"]["code"] == "invalid"
        assert app.workspaces.list() == []
        ok = {"bot": "b1", "request": "workspace", "params": {"name": "w2", "template": "minimal"}}
        response = httpx.post(server.url + "/v1/workspaces", json=ok,
                              headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert response.status_code == 201, response.text
