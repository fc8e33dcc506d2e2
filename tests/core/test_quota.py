"""The workspace quota's arithmetic and decisions (core/quota.py), and its settings."""

from __future__ import annotations

import pytest

from warden.core.errors import InvalidInput
from warden.core.quota import DISK_KEY, FILE_SIZE_FLOOR, FILES_KEY, FREE_KEY, Quota, Usage, charge, file_charge
from warden.core.settings import KEYS, coerce, resolve

MiB = 1 << 20
Q = Quota(max_bytes=5 * MiB, max_files=500, min_free=1 << 30)


def test_a_file_is_charged_its_blocks_or_its_length_whichever_is_larger() -> None:
    assert charge(blocks=8, size=100) == 4096          # a small file takes a whole block
    assert charge(blocks=8, size=1 << 30) == 1 << 30   # a sparse file: its length (a mapping may fill it)
    assert file_charge(0) == 0 and file_charge(1) == 4096 and file_charge(8192) == 8192


def test_no_single_file_may_pass_the_bytes_left() -> None:
    assert Q.file_size_cap(Usage(1 * MiB, 10), 100 * MiB) == 4 * MiB
    assert Q.file_size_cap(Usage(0, 10), 1 * MiB) == 1 * MiB      # max_file_size is smaller
    # Already over, or a few bytes short: the floor, so bwrap can still write /etc/passwd and a
    # command can still run (the watcher stops one that grows).
    assert Q.file_size_cap(Usage(9 * MiB, 10), 100 * MiB) == FILE_SIZE_FLOOR
    assert Q.file_size_cap(Usage(5 * MiB - 34, 10), 100 * MiB) == FILE_SIZE_FLOOR


def test_only_growth_past_a_limit_breaks_it() -> None:
    start = Usage(1 * MiB, 10)
    assert Q.breach(start, Usage(5 * MiB, 500)) is None           # at the limits is within them
    assert Q.breach(start, Usage(5 * MiB + 1, 10)) == DISK_KEY
    assert Q.breach(start, Usage(1 * MiB, 501)) == FILES_KEY
    over = Usage(8 * MiB, 600)  # the limits were lowered below what the workspace holds
    assert Q.breach(over, Usage(7 * MiB, 550)) is None            # a run that deletes goes on
    assert Q.breach(over, Usage(8 * MiB + 4096, 550)) == DISK_KEY  # one that grows is stopped


def test_writes_are_refused_only_when_they_grow_the_workspace_past_a_limit() -> None:
    used = Usage(4 * MiB, 499)
    assert Q.refusal(used, MiB, 1, "writing", "w") is None
    message, key = Q.refusal(used, MiB + 1, 1, "writing 1 MiB to /a", "w") or ("", "")
    assert key == DISK_KEY and "writing 1 MiB to /a" in message and "raise workspace.max_disk" in message
    assert Q.refusal(used, 0, 2, "making folder /d", "w") == (
        "making folder /d would take workspace w to 501 files, over workspace.max_files (500): "
        "delete files in it or raise workspace.max_files", FILES_KEY)
    full = Usage(6 * MiB, 600)
    assert Q.refusal(full, -MiB, 0, "replacing a file with a smaller one", "w") is None


def test_free_space_below_min_free_is_a_problem_that_names_the_setting() -> None:
    assert Q.free_problem(2 << 30, "/home/u/.warden") is None
    problem = Q.free_problem(512 * MiB, "/home/u/.warden")
    assert problem is not None and "512M" in problem and FREE_KEY in problem and "/home/u/.warden" in problem


def test_the_stop_note_is_one_line_naming_the_setting_and_the_fix() -> None:
    note = Q.stop_note(DISK_KEY, Usage(5 * MiB + 300 * 1024, 9), "bot1")
    assert "\n" not in note and note.startswith("warden: stopped: workspace bot1 grew to 5.3M")
    assert "workspace.max_disk (5M)" in note and "warden config set workspace.max_disk" in note
    assert "501 files, over workspace.max_files (500)" in Q.stop_note(FILES_KEY, Usage(0, 501), "bot1")
    assert FREE_KEY in Q.stop_note(FREE_KEY, Usage(0, 1), "bot1")
    # The command ended on its own before the kill reached it: said so, not "stopped".
    ended = Q.stop_note(DISK_KEY, Usage(6 * MiB, 9), "bot1", stopped=False)
    assert ended.startswith("warden: as the command ended, workspace bot1 grew to 6M")


def test_settings_defaults_and_ranges() -> None:
    settings = resolve({}, {})
    assert (settings.get_size(DISK_KEY), settings.get_int(FILES_KEY), settings.get_size(FREE_KEY)) == (
        10 << 30, 500000, 1 << 30)
    assert all(KEYS[k].description for k in (DISK_KEY, FILES_KEY, FREE_KEY))
    assert coerce(DISK_KEY, "5M") == "5M" and coerce(FREE_KEY, "1000T") == "1000T"
    for key, bad in ((DISK_KEY, "512K"), (FILES_KEY, "99"), (FILES_KEY, str(1 << 33)), (FREE_KEY, "2048T")):
        with pytest.raises(InvalidInput, match=key.replace(".", r"\.")):
            coerce(key, bad)
