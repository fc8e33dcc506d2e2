"""The pure bwrap argv builder: flags, mount order, and what is never mounted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warden.core.bwrap_argv import PROXY_SOCKET, Bind, SandboxSpec, bwrap_argv, bwrap_environ, sandbox_path

WS = "/srv/warden/workspaces/demo"


def spec(**kw: object) -> SandboxSpec:
    base: dict[str, object] = {"workspace": WS, "command": ("python", "-V")}
    base.update(kw)
    return SandboxSpec(**base)  # type: ignore[arg-type]


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_isolation_flags_are_always_there() -> None:
    argv = bwrap_argv(spec())
    head = argv[: argv.index("--")]
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
                 "--disable-userns"):
        assert flag in head
    assert head[head.index("--cap-drop") + 1] == "ALL"
    assert head[head.index("--proc") + 1] == "/proc" and head[head.index("--dev") + 1] == "/dev"
    assert "--share-net" not in head
    assert head[head.index("--tmpfs") - 2:head.index("--tmpfs")] == ["--perms", "1777"]
    assert argv[argv.index("--") + 1:] == ["python", "-V"]


def test_disable_userns_left_out_when_bwrap_lacks_it() -> None:
    assert "--disable-userns" not in bwrap_argv(spec(disable_userns=False))


def test_system_is_read_only_and_nothing_of_home_root_or_state() -> None:
    argv = bwrap_argv(spec())
    assert ("/usr", "/usr") in pairs(argv, "--ro-bind")
    sources = [s for s, _ in pairs(argv, "--ro-bind") + pairs(argv, "--bind") + pairs(argv, "--ro-bind-try")]
    for forbidden in ("/", "/home", "/root", "/tmp", "/etc", "/srv/warden", "/var"):
        assert forbidden not in sources
    assert all(s.startswith("/etc/") for s, _ in pairs(argv, "--ro-bind-try"))
    assert "/etc/passwd" not in sources and "/etc/shadow" not in sources
    # The root is made read-only after every mount.
    assert argv[argv.index("--remount-ro") + 1] == "/"


def test_workspace_is_bound_read_write_at_its_own_path_and_is_the_cwd() -> None:
    argv = bwrap_argv(spec())
    assert (WS, WS) in pairs(argv, "--bind")
    assert argv[argv.index("--chdir") + 1] == WS


def test_a_working_folder_is_where_the_command_starts_after_every_mount() -> None:
    argv = bwrap_argv(replace(spec(), cwd=f"{WS}/src"))
    assert argv[argv.index("--chdir") + 1] == f"{WS}/src"
    assert argv.index("--chdir") > argv.index("--remount-ro")  # inside the finished sandbox


def test_protected_files_and_ro_zones_come_after_the_workspace_bind() -> None:
    protected = f"{WS}/.git/hooks"
    zone = f"{WS}/data"
    argv = bwrap_argv(spec(protected=(protected,), ro_zones=(zone,), pinned=(f"{WS}/.git",)))
    ws_at = argv.index(WS)
    assert argv.index(protected) > ws_at and argv.index(zone) > ws_at
    assert (protected, protected) in pairs(argv, "--ro-bind")
    assert (zone, zone) in pairs(argv, "--ro-bind")
    # .git is pinned (bound onto itself) before its hooks are covered.
    assert argv.index(f"{WS}/.git") < argv.index(protected)


def test_extra_paths_keep_their_mode_and_denied_paths_are_masked() -> None:
    argv = bwrap_argv(spec(extra_binds=(Bind("/data/in", "ro"), Bind("/data/out", "rw")),
                           masked_dirs=(f"{WS}/secret",), masked_files=(f"{WS}/.env",)))
    assert ("/data/in", "/data/in") in pairs(argv, "--ro-bind")
    assert ("/data/out", "/data/out") in pairs(argv, "--bind")
    assert argv[argv.index(f"{WS}/secret") - 1] == "--tmpfs"
    assert ("/dev/null", f"{WS}/.env") in pairs(argv, "--ro-bind")


def test_layers_and_interpreter_prefixes_are_read_only() -> None:
    argv = bwrap_argv(spec(ro_paths=("/opt/py/3.11", "/home/u/.warden/layers/abc")))
    assert ("/opt/py/3.11", "/opt/py/3.11") in pairs(argv, "--ro-bind")
    assert ("/home/u/.warden/layers/abc", "/home/u/.warden/layers/abc") in pairs(argv, "--ro-bind")


def test_network_proxy_binds_only_the_socket_and_the_resolver() -> None:
    none = bwrap_argv(spec())
    assert "/etc/resolv.conf" not in none
    argv = bwrap_argv(spec(network="proxy", proxy_socket="/run/user/0/w/proxy.sock"))
    assert ("/run/user/0/w/proxy.sock", PROXY_SOCKET) in pairs(argv, "--ro-bind")
    assert ("/etc/resolv.conf", "/etc/resolv.conf") in pairs(argv, "--ro-bind-try")
    with pytest.raises(ValueError):
        bwrap_argv(spec(network="proxy"))


def test_fds_for_seccomp_and_synthesized_files() -> None:
    argv = bwrap_argv(spec(seccomp_fd=7, data_files=((8, "/etc/passwd"),)))
    assert argv[argv.index("--seccomp") + 1] == "7"
    assert ("8", "/etc/passwd") in pairs(argv, "--file")
    # A sealed program: executable, readable by no one (its process is not dumpable).
    sealed = bwrap_argv(spec(sealed_programs=((9, "/etc/warden/prlimit"),)))
    at = sealed.index("/etc/warden/prlimit")
    assert sealed[at - 4:at + 1] == ["--perms", "0111", "--file", "9", "/etc/warden/prlimit"]
    links = bwrap_argv(spec(etc_links=(("/usr/share/zoneinfo/UTC", "/etc/localtime"),)))
    assert ("/usr/share/zoneinfo/UTC", "/etc/localtime") in pairs(links, "--symlink")


def test_bad_specs_are_refused() -> None:
    with pytest.raises(ValueError):
        bwrap_argv(spec(command=()))
    with pytest.raises(ValueError):
        bwrap_argv(spec(workspace="relative/ws"))


def test_path_puts_workspace_tools_first() -> None:
    parts = sandbox_path(WS).split(":")
    assert parts[:2] == [f"{WS}/.venv/bin", f"{WS}/node_modules/.bin"]
    assert "/usr/bin" in parts


def test_kernel_knobs_in_proc_are_covered_read_only_after_the_fresh_proc() -> None:
    # As root the sandbox's uid 0 is the host's: a writable /proc/sys/kernel/core_pattern
    # would let a command make the host kernel run its program as root.
    argv = bwrap_argv(spec(proc_readonly=("/proc/sys", "/proc/sysrq-trigger"),
                           proc_masked_files=("/proc/timer_list",), proc_masked_dirs=("/proc/acpi",)))
    proc_at = argv.index("--proc")
    assert ("/proc/sys", "/proc/sys") in pairs(argv, "--ro-bind")
    assert ("/proc/sysrq-trigger", "/proc/sysrq-trigger") in pairs(argv, "--ro-bind")
    assert ("/dev/null", "/proc/timer_list") in pairs(argv, "--ro-bind")
    assert argv[argv.index("/proc/acpi") - 1] == "--tmpfs"
    assert min(argv.index("/proc/sys"), argv.index("/proc/timer_list"), argv.index("/proc/acpi")) > proc_at
    # Even a spec built without host facts keeps /proc/sys read-only.
    assert ("/proc/sys", "/proc/sys") in pairs(bwrap_argv(spec()), "--ro-bind")


def test_loader_variables_never_reach_bwrap_itself() -> None:
    # bwrap runs on the host (as root when Warden is): LD_PRELOAD in its own environment
    # would load a bot's library outside the sandbox. They go through --setenv instead.
    env = {"PATH": "/usr/bin", "LD_PRELOAD": f"{WS}/evil.so", "LD_LIBRARY_PATH": WS,
           "GCONV_PATH": WS, "GLIBC_TUNABLES": "x", "MALLOC_CHECK_": "3", "TOKEN": "secret"}
    s = spec(env=env)
    outer = bwrap_environ(s)
    assert outer == {"PATH": "/usr/bin", "TOKEN": "secret"}
    argv = bwrap_argv(s)
    head = argv[: argv.index("--")]
    setenv = {head[i + 1]: head[i + 2] for i, a in enumerate(head) if a == "--setenv"}
    assert setenv == {k: v for k, v in env.items() if k not in outer}
    assert "secret" not in head  # other values (secrets) stay out of the visible argv


def test_workspace_sources_are_mounted_from_the_descriptors_the_runner_pinned() -> None:
    hooks, git, zone = f"{WS}/.git/hooks", f"{WS}/.git", f"{WS}/data"
    s = spec(protected=(hooks,), pinned=(git,), ro_zones=(zone,),
             extra_binds=(Bind("/data/in", "ro"), Bind(f"{WS}/ref", "ro")))
    assert s.workspace_sources() == [f"{WS}/ref", git, hooks, zone]  # /data/in is not the bot's
    argv = bwrap_argv(replace(s, bind_fds=((git, 11), (hooks, 12), (zone, 13), (f"{WS}/ref", 14))))
    assert ("11", git) in pairs(argv, "--bind-fd")
    assert ("12", hooks) in pairs(argv, "--ro-bind-fd") and ("13", zone) in pairs(argv, "--ro-bind-fd")
    assert ("14", f"{WS}/ref") in pairs(argv, "--ro-bind-fd")
    assert ("/data/in", "/data/in") in pairs(argv, "--ro-bind")
    assert hooks not in [src for src, _ in pairs(argv, "--ro-bind")]
