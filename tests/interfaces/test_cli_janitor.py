"""`warden janitor` through the real CLI: a dry run says what it would do and does nothing; a
pass does it; its outcome is one line each (or one JSON document)."""

from __future__ import annotations

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.used_home


def test_a_dry_run_then_a_pass(cli: Cli) -> None:
    assert cli("create", "jan-tmp", "--template", "minimal", "--type", "temporary", "--ttl", "1s").code == 0
    import time

    time.sleep(1.2)  # its own expiry passes (by the real clock: this is the CLI)
    dry = cli("janitor", "--dry-run", "--json")
    assert dry.code == 0 and dry.json["data"]["ran"] is True
    assert [(c["workspace"], c["action"], c["reason"]) for c in dry.json["data"]["chores"]] == [
        ("jan-tmp", "destroy", "expired")]
    assert cli("info", "jan-tmp").code == 0  # nothing done
    done = cli("janitor", "--once")
    assert done.code == 0 and "did destroy jan-tmp (expired since" in done.stdout
    assert cli("info", "jan-tmp").code == 4
    assert "nothing to do" in cli("janitor", "--once").stdout


def test_doctor_shows_the_disk_alert(cli: Cli) -> None:
    quiet = cli("doctor", "--json").json["data"]["checks"]
    assert [c["ok"] for c in quiet if c["name"] == "disk"] == [True]
    alert = cli("doctor", "--json", env={"WARDEN_CLEANUP_DISK_ALERT_PERCENT": "1"})
    [disk] = [c for c in alert.json["data"]["checks"] if c["name"] == "disk"]
    assert not disk["ok"] and not disk["required"] and "cleanup.disk_alert_percent" in disk["detail"]
