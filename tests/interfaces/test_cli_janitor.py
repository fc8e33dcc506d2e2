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
