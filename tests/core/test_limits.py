"""Per-run overrides are checked the same way for the CLI, the HTTP API and Python callers."""

from __future__ import annotations

import math

import pytest

from warden.core.errors import InvalidInput
from warden.core.limits import MIN_MEMORY, Limits, apply_overrides


def test_overrides_apply() -> None:
    limits = apply_overrides(Limits(), timeout=30, memory="256M", cpu=20, pids=64)
    assert (limits.timeout_s, limits.memory, limits.cpu_seconds, limits.pids) == (30.0, 256 << 20, 20, 64)


@pytest.mark.parametrize("kwargs", [
    {"timeout": 0}, {"timeout": -1}, {"timeout": math.nan}, {"timeout": math.inf}, {"timeout": 10**17},
    {"timeout": 86_401}, {"timeout": True}, {"memory": MIN_MEMORY - 1}, {"memory": "1K"}, {"cpu": 0},
    {"pids": 3},
])
def test_bad_overrides_are_invalid_input(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        apply_overrides(Limits(), **kwargs)
