"""The live sandbox's network proxy runs on the host beside the sandbox and reads what the
sandbox's commands send: it is started with none of Warden's secrets in its environment."""

from __future__ import annotations

import os
from pathlib import Path

from warden.adapters.sandbox.live import _Proxy

SECRETS = {"WARDEN_CLUSTER_KEY": "Y2x1c3Rlci1rZXktY2x1c3Rlci1rZXktY2x1c3Rlci0=",
           "WARDEN_TOKEN_PEPPER": "cGVwcGVy", "WARDEN_MASTER_KEY": "bWFzdGVy", "WARDEN_TOKEN": "wdn_secret",
           "WARDEN_DATABASE_URL": "postgresql+psycopg://warden:hunter2@db/warden", "AWS_SECRET_ACCESS_KEY": "x"}


def test_live_proxy_gets_no_secret_of_wardens_environment(tmp_path: Path) -> None:
    environ = {**os.environ, **SECRETS, "LANG": "C.UTF-8"}
    proxy = _Proxy.start({"allowed": ["example.com:443"], "denied": []}, tmp_path, environ)
    try:
        seen = dict(line.split("=", 1) for line in
                    Path(f"/proc/{proxy.proc.pid}/environ").read_text().split("\0") if "=" in line)
    finally:
        proxy.kill()
    leaked = sorted(name for name in SECRETS if name in seen)
    assert leaked == [], f"the proxy's environment holds {leaked}"
    assert seen.get("LANG") == "C.UTF-8"  # what it needs still passes
