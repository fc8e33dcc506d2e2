"""What a run used, from what its runner read (core/runs.py `usage_of`, `Usage.to_json`)."""

from __future__ import annotations

from warden.core.runs import RunResult, Usage, usage_of


def test_a_cgroup_measures_the_whole_run_and_is_preferred() -> None:
    used = usage_of(cpu_s=0.2, maxrss_kib=1024, cgroup_peak=300 << 20, cgroup_cpu_s=0.5)
    assert used == Usage(0.5, 300 << 20, "cgroup", "cgroup")


def test_wait4_alone_gives_cpu_and_the_largest_process_peak() -> None:
    assert usage_of(cpu_s=0.25, maxrss_kib=2048) == Usage(0.25, 2 << 20, "process", "rusage")


def test_cgroup_v1_memory_with_wait4_cpu_says_cgroup() -> None:
    # v1 has no cpu.stat in its memory and pids hierarchies: the CPU is wait4's, the memory the cgroup's.
    assert usage_of(cpu_s=0.3, maxrss_kib=2048, cgroup_peak=5 << 20) == Usage(0.3, 5 << 20, "cgroup", "cgroup")


def test_nothing_read_is_no_usage_and_nonsense_is_not_kept() -> None:
    assert usage_of() is None
    assert usage_of(cpu_s=None, maxrss_kib=0, cgroup_peak=0) is None
    assert usage_of(cpu_s=-1.0) == Usage(0.0, None, None, "rusage")


def test_the_json_rounds_cpu_and_names_every_field() -> None:
    assert Usage(0.123456, 10, "process", "rusage").to_json() == {
        "cpu_s": 0.123, "memory_peak_bytes": 10, "memory_measured": "process", "measured_by": "rusage"}
    assert Usage(None, None, None).to_json()["cpu_s"] is None


def test_run_results_json_keeps_its_six_fields_with_usage() -> None:
    result = RunResult(0, "", "", 0.1, False, None, usage=Usage(0.1, 1, "process", "rusage"))
    assert set(result.to_json()) == {"exit_code", "stdout", "stderr", "duration_s", "timed_out", "signal"}
