"""The node in `warden doctor` and `warden info` on a single-node home (SQLite), through the real
CLI; a cluster's doctor (nodes up and down) is in tests/interfaces/test_nodes.py (PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Cli


def _node_check(result_json: dict[str, object]) -> dict[str, object]:
    checks = result_json["checks"]
    assert isinstance(checks, list)
    found = [c for c in checks if c["name"] == "node"]
    assert len(found) == 1
    return dict(found[0])


@pytest.mark.initialised_home
def test_doctor_names_the_node_and_says_single_node(cli: Cli) -> None:
    env = {"WARDEN_NODE": "desk-1"}
    doctor = cli("doctor", "--json", env=env)
    assert doctor.code in (0, 1)
    data = doctor.json["data"]
    assert data["node"] == {"name": "desk-1", "clustered": False, "up": None, "down": None}
    check = _node_check(data)
    assert check["ok"] is True and check["required"] is False
    assert "node desk-1" in str(check["detail"]) and "single-node home" in str(check["detail"])
    text = cli("doctor", env=env).stdout
    assert "node desk-1: a single-node home" in text
    # Another name, another answer: the name shown is this process's WARDEN_NODE.
    assert _node_check(cli("doctor", "--json", env={"WARDEN_NODE": "desk-2"}).json["data"])["detail"] \
        != check["detail"]


def test_doctor_on_a_home_not_set_up_creates_no_registry(cli: Cli, home: Path) -> None:
    doctor = cli("doctor", "--json")
    assert doctor.code in (0, 1)
    assert _node_check(doctor.json["data"])["ok"] is True
    assert not (home / "warden.db").exists()


def test_a_bad_node_name_is_one_line_in_doctor_too(cli: Cli) -> None:
    doctor = cli("doctor", "--json", env={"WARDEN_NODE": "bad name/\n"})
    check = _node_check(doctor.json["data"])
    assert check["ok"] is False and "bad WARDEN_NODE" in str(check["detail"])


@pytest.mark.used_home
def test_info_text_shows_the_node_after_the_status(cli: Cli) -> None:
    assert cli("create", "ni", "--template", "minimal", env={"WARDEN_NODE": "desk-1"}).code == 0
    lines = cli("info", "ni", env={"WARDEN_NODE": "desk-1"}).stdout.splitlines()
    status = [i for i, line in enumerate(lines) if line.startswith("status: ")]
    assert status and lines[status[0] + 1] == "node: desk-1 (this node)"
    assert sum(1 for line in lines if line.startswith("node: ")) == 1
    assert cli("info", "ni", "--json", env={"WARDEN_NODE": "desk-1"}).json["data"]["node"] == "desk-1"
