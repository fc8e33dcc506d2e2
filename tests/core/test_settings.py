"""The settings schema: coercion, sources and one-line errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.core.durations import (
    MAX_RUN_TIMEOUT,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
    parse_timeout,
)
from warden.core.errors import InvalidInput, NotFound
from warden.core.settings import KEYS, coerce, env_name, format_value, resolve


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


@pytest.mark.parametrize(("key", "value", "says"), [
    ("sandbox.memory", "0", "below the minimum 16M"),
    ("sandbox.memory", "16777215", "below the minimum 16M"),
    ("sandbox.timeout", "0s", "below the minimum 1s"),
    ("sandbox.timeout", "86401s", "above the maximum 1d"),
    ("api.request_timeout", "0m", "below the minimum 1s"),
    ("grants.default_ttl", "0d", "below the minimum 1s"),
    ("api.port", "70000", "above the maximum 65535"),
    ("api.port", 65536, "above the maximum 65535"),
    ("api.workers", "65", "above the maximum 64"),
    ("sandbox.pids", "3", "below the minimum 4"),
    ("sandbox.root_dir", "relative/dir", "relative path"),
    ("sandbox.root_dir", "./here", "relative path"),
    ("sandbox.root_dir", "/a\0b", "NUL"),
])
def test_values_out_of_range_are_refused_naming_the_key(key: str, value: object, says: str) -> None:
    with pytest.raises(InvalidInput, match=key.replace(".", r"\.")) as exc:
        coerce(key, value)
    assert says in exc.value.message
    # The environment and the config file go through the same rule.
    with pytest.raises(InvalidInput, match=env_name(key)):
        resolve({}, {env_name(key): str(value)})
    section, _, name = key.partition(".")
    with pytest.raises(InvalidInput, match=r"cfg\.toml"):
        resolve({section: {name: value}}, {}, file_label="cfg.toml")


@pytest.mark.parametrize(("key", "value"), [
    ("sandbox.memory", "16M"), ("sandbox.timeout", "1s"), ("sandbox.timeout", "24h"), ("api.port", "1"),
    ("api.port", "65535"), ("sandbox.root_dir", ""), ("sandbox.root_dir", "~/ws"), ("sandbox.root_dir", "/srv"),
])
def test_values_at_the_edges_are_kept(key: str, value: str) -> None:
    assert coerce(key, value) in (value, int(value) if value.isdigit() else value)


def test_defaults_pass_their_own_rules() -> None:
    for key, spec in KEYS.items():
        assert coerce(key, spec.default) == spec.default


def test_run_timeouts() -> None:
    assert parse_timeout("90") == 90.0
    assert parse_timeout("2.5") == 2.5
    assert parse_timeout("10m") == 600.0
    assert parse_timeout("1d") == MAX_RUN_TIMEOUT.total_seconds()
    for text in ("99999999999999999", "1e400", "inf", "2d", "86401"):
        with pytest.raises(InvalidInput, match=r"--timeout .* maximum of 1d \(86400 s\)"):
            parse_timeout(text)
    for text in ("0", "-1", "nan", "0s", "soon", ""):
        with pytest.raises(InvalidInput, match="--timeout"):
            parse_timeout(text)


def test_sizes_are_spelled_back_exactly() -> None:
    assert [format_size(n) for n in (16 * 1024**2, 1024**3, 1536 * 1024, 100, 0)] == ["16M", "1G", "1536K", "100", "0"]
    for n in (1, 1023, 1024, 3 * 1024**2, 5 * 1024**4):
        assert parse_size(format_size(n)) == n


@pytest.mark.parametrize(("text", "items"), [
    ('["python3","echo"]', ["python3", "echo"]),
    ("['a', 'b']", ["a", "b"]),
    ("[ ]", []),
    ('["a,b", " c"]', ["a,b", " c"]),
    ("[::1]:443, x", ["[::1]:443", "x"]),  # a,b,c form whose first item has brackets
])
def test_list_values_from_arrays(text: str, items: list[str]) -> None:
    assert coerce("sandbox.allowed_commands", text) == items
    assert resolve({}, {env_name("sandbox.allowed_commands"): text}).get("sandbox.allowed_commands") == items


@pytest.mark.parametrize("text", ['["a",', '["a", 1]', '[["a"]]', "['a'"])
def test_malformed_arrays_are_one_line_of_invalid(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"sandbox\.allowed_commands") as caught:
        coerce("sandbox.allowed_commands", text)
    assert "\n" not in caught.value.message


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8), max_size=5))
def test_printed_lists_read_back_the_same(items: list[str]) -> None:
    assert coerce("sandbox.allowed_commands", format_value(items)) == items


def test_printed_scalars_read_back_the_same() -> None:
    for key, value in (("sandbox.enabled", True), ("sandbox.memory", "512M"), ("sandbox.timeout", "90s"),
                       ("sandbox.pids", 64), ("sandbox.root_dir", "")):
        assert coerce(key, format_value(value)) == value
