"""docs/threat-model.md names the tests that keep each row true: they must exist."""

from __future__ import annotations

import re

from tests.adapters.sandbox.escapes import ATTACKS
from tests.conftest import REPO

DOC = REPO / "docs" / "threat-model.md"


def test_every_test_the_threat_model_names_exists() -> None:
    text = DOC.read_text()
    refs = re.findall(r"`(tests/[\w/]+\.py(?:::\w+)?)`", text)
    assert len(refs) > 15
    for ref in refs:
        path, _, name = ref.partition("::")
        if path.endswith("sandbox/escapes.py") and name:
            assert name in ATTACKS, ref  # an attack the escape tests run as root and as nobody
            continue
        file = REPO / path
        assert file.is_file(), ref
        if name:
            assert re.search(rf"^def {name}\(", file.read_text(), re.M), ref


def test_every_row_names_a_test() -> None:
    rows = [line for line in DOC.read_text().splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) >= 13
    for row in rows:
        assert "`tests/" in row, row
