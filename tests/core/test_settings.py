"""The settings schema: coercion, sources and one-line errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.core.durations import format_duration, parse_duration, parse_size
from warden.core.errors import InvalidInput, NotFound
from warden.core.settings import KEYS, coerce, env_name, resolve


def test_defaults_follow_the_seed() -> None:
    settings = resolve({}, {})
    assert settings.get("sandbox.enabled") is False
    assert settings.get("sandbox.block_system_paths") is True
    assert settings.get("sandbox.max_file_size_mb") == 100
    assert settings.get("sandbox.allowed_commands") == ["pip", "npm", "git", "python", "node"]
    assert {settings.source(k) for k in KEYS} == {"default"}


def test_environment_beats_file_beats_default() -> None:
    table = {"sandbox": {"max_file_size_mb": 5, "enabled": True}}
    settings = resolve(table, {env_name("sandbox.max_file_size_mb"): "9"})
    assert (settings.get("sandbox.max_file_size_mb"), settings.source("sandbox.max_file_size_mb")) == (9, "environment")
    assert (settings.get("sandbox.enabled"), settings.source("sandbox.enabled")) == (True, "file")


@pytest.mark.parametrize(("key", "value"), [
    ("sandbox.max_file_size_mb", "lots"), ("sandbox.max_file_size_mb", True),
    ("sandbox.max_file_size_mb", "0"), ("sandbox.enabled", "maybe"), ("sandbox.memory", "much"),
    ("sandbox.timeout", "soon"), ("sandbox.allowed_commands", 3),
])
def test_bad_values_say_which_key(key: str, value: object) -> None:
    with pytest.raises(InvalidInput, match=key.replace(".", r"\.")):
        coerce(key, value)


def test_bad_file_value_names_the_file() -> None:
    with pytest.raises(InvalidInput, match=r"cfg\.toml"):
        resolve({"sandbox": {"enabled": "perhaps"}}, {}, file_label="cfg.toml")
    with pytest.raises(InvalidInput, match="unknown setting"):
        resolve({"sandbox": {"enabeld": True}}, {}, file_label="cfg.toml")


def test_unknown_key_is_not_found() -> None:
    with pytest.raises(NotFound):
        coerce("nope.key", "1")


def test_list_values_from_text() -> None:
    assert coerce("sandbox.allowed_commands", "pip, git,,python") == ["pip", "git", "python"]


def test_absurd_durations_are_refused_not_overflowed() -> None:
    for text in ("999999999d", "999999999w", "5300w"):
        with pytest.raises(InvalidInput, match="100 years"):
            parse_duration(text)


@given(st.integers(min_value=1, max_value=5000), st.sampled_from("smhdw"))
def test_durations_round_trip(number: int, unit: str) -> None:
    delta = parse_duration(f"{number}{unit}")
    assert parse_duration(format_duration(delta)) == delta


def test_sizes() -> None:
    assert parse_size("256M") == 256 * 1024**2
    assert parse_size("1GiB") == 1024**3
    assert parse_size("4096") == 4096
    with pytest.raises(InvalidInput):
        parse_size("-1M")
