"""In-sandbox failures explained in one Warden line (pure)."""

from __future__ import annotations

import pytest

from warden.core.runs import explain_denied_path, explain_failure, explain_not_started, nearest_program

FACTS = {"oom_killed": False, "network": False, "max_file_mb": 100, "memory": 512 << 20}


def test_a_missing_program_names_what_the_sandbox_sees() -> None:
    line = explain_failure(127, None, "bwrap: execvp pyhton: No such file or directory\n", **FACTS)
    assert line is not None and "pyhton is not in the sandbox" in line and "warden install" in line
    assert "not executable" in (explain_failure(126, None, "bwrap: execvp ./x: Permission denied", **FACTS) or "")


@pytest.mark.parametrize("starter", ["warden-rlimit-exec", "prlimit"])
def test_a_program_the_live_sandboxs_launcher_could_not_start_is_explained_too(starter: str) -> None:
    # A live sandbox starts a command through its sealed launcher (else util-linux's prlimit): a
    # binary whose loader is missing (built for musl, say) fails there, in the launcher's words.
    line = explain_failure(127, None, f"{starter}: failed to execute ./tool: No such file or directory\n", **FACTS)
    assert line is not None and line.startswith("warden: ./tool is not in the sandbox"), line
    line = explain_failure(126, None, f"{starter}: failed to execute ./tool: Exec format error\n", **FACTS)
    assert line == "warden: ./tool is not executable inside the sandbox"


def test_only_the_exec_of_the_program_the_command_named_is_explained() -> None:
    # A background process's stderr is the command's: it may print the exec's words itself.
    said = "bwrap: execvp nosuchtool: No such file or directory\n"
    assert explain_not_started(127, said, named="sh") is None
    assert explain_not_started(127, said, named="nosuchtool") is not None
    # The sealed launcher names the program at the path where it found it.
    said = "warden-rlimit-exec: failed to execute /usr/bin/tool: Exec format error\n"
    assert explain_not_started(126, said, named="tool") == "warden: /usr/bin/tool is not executable inside the sandbox"
    assert explain_not_started(126, said, named="./tool") is None


def test_a_program_hidden_by_the_path_the_command_was_given_is_said_to_be_hidden() -> None:
    failed = "bwrap: execvp sh: No such file or directory\n"
    line = explain_failure(127, None, failed, **FACTS, programs={"sh"}, given_path="/nowhere")
    assert line is not None and "sh is not on the PATH the command was given (PATH=/nowhere)" in line, line
    assert "not in the sandbox" not in line
    # Missing from the sandbox's own PATH too, or named by a path: the general line.
    for argv0, programs in (("sh", set()), ("/bin/sh", {"sh"})):
        line = explain_failure(127, None, f"bwrap: execvp {argv0}: No such file or directory\n", **FACTS,
                               programs=programs, given_path="/nowhere")
        assert line is not None and f"{argv0} is not in the sandbox" in line, line
    # A PATH the sandbox chose is shown escaped and cut short.
    line = explain_failure(127, None, failed, **FACTS, programs={"sh"}, given_path="/x\x1b[2J" + "a" * 500)
    assert line is not None and "\x1b" not in line and len(line) < 600, line


def test_a_mistyped_program_gets_the_nearest_name_on_the_path() -> None:
    seen = {"python", "python3", "pip", "node", "ls"}
    line = explain_failure(127, None, "bwrap: execvp pyhton: No such file or directory\n", **FACTS, programs=seen)
    assert line is not None and line.startswith("warden: pyhton is not in the sandbox: did you mean python? (")
    assert nearest_program("nodee", seen) == ": did you mean node?"
    assert nearest_program("zzzzzz", seen) == ""  # nothing close
    assert nearest_program("./pyhton", seen) == ""  # a path is a file, not a mistyped command
    # A bot names the files of its .venv/bin: one with an escape sequence is never suggested.
    assert nearest_program("pyhton", {"pyhton\x1b]0;x\x07", "pyhto\n"}) == ""


def test_limits_and_the_network_are_named_with_their_setting() -> None:
    assert "sandbox.max_file_size_mb" in (explain_failure(153, 25, "", **FACTS) or "")
    assert "sandbox.max_file_size_mb" in (explain_failure(1, None, "OSError: [Errno 27] File too large", **FACTS) or "")
    assert "--memory" in (explain_failure(137, 9, "", **{**FACTS, "oom_killed": True}) or "")
    pip = "WARNING: Retrying ... Failed to establish a new connection: [Errno -3] Temporary failure in name resolution"
    assert "--net allow" in (explain_failure(1, None, pip, **FACTS) or "")
    assert explain_failure(1, None, pip, **{**FACTS, "network": True}) is None  # it had a network
    assert explain_failure(1, None, "plain failure", **FACTS) is None
    assert explain_failure(0, None, "Temporary failure in name resolution", **FACTS) is None


def test_the_process_limit_is_named_when_a_fork_fails() -> None:
    shell = "sh: 1: Cannot fork\n"
    assert "--pids N" in (explain_failure(2, None, shell, **FACTS, pids=20) or "")
    python = "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"
    assert "(20 processes" in (explain_failure(1, None, python, **FACTS, pids=20) or "")
    assert explain_failure(0, None, shell, **FACTS, pids=20) is None


def test_an_allocation_refused_under_an_address_space_limit_names_the_memory_limit() -> None:
    """Without a memory cgroup the limit is an rlimit: nothing is killed, the program fails saying so."""
    said = explain_failure(1, None, "Traceback …\nMemoryError\n", **FACTS)
    assert said is not None and "ran out of memory (limit 512 MiB)" in said and "--memory" in said
    assert explain_failure(0, None, "MemoryError", **FACTS) is None  # it coped: nothing to explain


def test_a_write_to_the_read_only_system_says_where_writes_go() -> None:
    """The README's first refusal: the program's "Read-only file system" alone does not say it is by design."""
    python = "OSError: [Errno 30] Read-only file system: '/etc/hostname'\n"
    said = explain_failure(1, None, python, **FACTS)
    assert said is not None and "read-only in the sandbox" in said and "--mode rw" in said
    bot = explain_failure(1, None, python, **FACTS, bot=True)
    assert bot is not None and "/tmp" in bot and "warden sandbox" not in bot  # a bot cannot run the CLI
    assert explain_failure(0, None, python, **FACTS) is None  # it coped: nothing to explain


def test_a_program_name_from_the_commands_stderr_carries_no_escape_sequence() -> None:
    # The name comes from the last line of stderr, which the command writes itself: a bot's
    # `bwrap: execvp <OSC><CSI 2J>` must not reach the terminal through Warden's own line, which
    # `warden run --json` writes raw to stderr while the command's stderr is JSON-escaped.
    forged = "bwrap: execvp py\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202ethon\r: No such file or directory\n"
    for code in (126, 127):
        line = explain_failure(code, None, forged, **FACTS, programs={"python"})
        shown = "warden: py\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m\\u202ethon\\r is "
        assert line is not None and line.startswith(shown), line
        assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 or 0x202A <= ord(c) <= 0x202E for c in line), line
    # A long name is cut: one line of a terminal, not a screenful the command chose.
    line = explain_failure(127, None, f"bwrap: execvp {'x' * 5000}: No such file or directory", **FACTS) or ""
    assert len(line) < 600 and "x" * 100 + "…" in line, len(line)


def test_the_cpu_limit_is_named_when_the_kernel_stops_a_command() -> None:
    # SIGXCPU itself, or a shell's words for it (the shell reports 152).
    for signal, tail in ((24, ""), (None, "sh: line 1: 7 CPU time limit exceeded  python3 spin.py")):
        why = explain_failure(152, signal, tail, oom_killed=False, network=False, max_file_mb=100, memory=1 << 30,
                              cpu_seconds=5)
        assert why is not None and "used up its CPU time (5 s)" in why and "--cpu SECONDS" in why
    bot = explain_failure(152, 24, "", oom_killed=False, network=False, max_file_mb=100, memory=1 << 30,
                          cpu_seconds=5, bot=True)
    assert bot is not None and "sandbox.cpu_seconds" in bot and "--cpu" not in bot
    assert explain_failure(152, None, "", oom_killed=False, network=False, max_file_mb=100, memory=1 << 30,
                           cpu_seconds=5) is None  # a program's own 152 says nothing of the limit


def test_a_program_the_network_relay_could_not_start_is_explained_as_without_network() -> None:
    # A run with network starts its command through Warden's relay (adapters/sandbox/forwarder.py).
    said = "warden-forwarder: failed to execute pyhton: No such file or directory\n"
    line = explain_failure(127, None, said, **{**FACTS, "network": True}, programs={"python"})
    assert line is not None and line.startswith("warden: pyhton is not in the sandbox: did you mean python?"), line


def test_the_systems_pip_refusing_to_install_points_at_warden_install() -> None:
    # Debian's pip (PEP 668), which `pip` finds: a workspace's venv has no pip of its own.
    said = ("error: externally-managed-environment\n\n× This environment is externally managed\n"
            "hint: See PEP 668 for the detailed specification.\n")
    line = explain_failure(1, None, said, **{**FACTS, "network": True})
    assert line is not None and "`warden install NAME PACKAGE...`" in line, line
    bot = explain_failure(1, None, said, **{**FACTS, "network": True}, bot=True)
    assert bot is not None and "/install" in bot and "warden install" not in bot, bot
    assert explain_failure(0, None, said, **FACTS) is None  # it worked after all (--break-system-packages)


def test_the_way_to_add_packages_names_the_workspace_and_what_the_asker_can_use() -> None:
    """A line to copy: the person's `warden install web …`, a bot's install route for web; an MCP
    bot, which no tool lets add packages nor ask for network, is sent to the person."""
    pip = "error: externally-managed-environment\n"
    offline = "socket.gaierror: [Errno -3] Temporary failure in name resolution\n"
    person = explain_failure(1, None, pip, **FACTS, workspace="web") or ""
    assert "`warden install web PACKAGE...`" in person, person
    http = explain_failure(1, None, pip, **FACTS, workspace="web", bot=True) or ""
    assert "POST /v1/workspaces/web/install" in http, http
    for said in (pip, offline):
        mcp = explain_failure(1, None, said, **FACTS, workspace="web", bot=True, mcp=True) or ""
        assert "ask the person to run `warden install web PACKAGE...`" in mcp and "/v1/" not in mcp, mcp


def test_python_dash_m_pip_in_a_venv_without_pip_points_at_warden_install() -> None:
    """`python -m pip install`, the form pip's docs give, finds the venv's Python: no pip module,
    and no line from Warden, where the system's `pip` got one."""
    said = "/w/.venv/bin/python: No module named pip\n"
    line = explain_failure(1, None, said, **FACTS, workspace="web") or ""
    assert line == ("warden: the workspace's venv has no pip; `warden install web PACKAGE...` adds packages to the "
                    "workspace's venv, with the network it needs for that command"), line
    bot = explain_failure(1, None, said, **FACTS, workspace="web", bot=True) or ""
    assert "POST /v1/workspaces/web/install" in bot, bot


def test_a_read_only_folder_of_the_workspace_is_named_with_the_way_its_files_change() -> None:
    """A bot told "write in the workspace" had written in the workspace: in a folder (a zone) whose
    writes wait for a person. In folder words for a bot (seed 003), through what it can call."""
    said = "sh: 1: cannot create final/b.txt: Read-only file system\n"
    http = explain_failure(2, None, said, **FACTS, bot=True, workspace="zz", read_only_folders=["final", "input"]) or ""
    assert "this workspace's folders /final, /input" in http, http
    assert "PUT /v1/workspaces/zz/files/content?path=" in http, http
    assert "zone" not in http, http
    mcp = explain_failure(2, None, said, **FACTS, bot=True, mcp=True, workspace="zz", read_only_folders=["final"]) or ""
    assert "through the write_file tool" in mcp and "/v1/" not in mcp, mcp
    person = explain_failure(2, None, said, **FACTS, workspace="zz", read_only_folders=["final"]) or ""
    assert "the zones /final" in person and "`warden fs zz write PATH`" in person, person


def test_a_denied_path_not_found_is_named_only_when_it_is_the_deny_s() -> None:
    denied = ["/home/u/data", "/srv/secret"]
    for tail in ("cat: /home/u/data/x.csv: No such file or directory\n",
                 "FileNotFoundError: [Errno 2] No such file or directory: '/home/u/data/x.csv'\n",
                 "ls: cannot access '/home/u/data': No such file or directory\n"):
        said = explain_denied_path(tail, denied, workspace="notes")
        assert said is not None and said.startswith("warden: /home/u/data is denied"), tail
        assert "`warden sandbox forget /home/u/data --workspace notes`" in said
    for tail in ("cat: /home/u/data-2/x: No such file or directory\n",  # whole segments only
                 "cat: ./home/u/data/x: No such file or directory\n",  # not an absolute path
                 "/home/u/data/x: Permission denied\n", ""):
        assert explain_denied_path(tail, denied, workspace="notes") is None, tail
    assert explain_denied_path("cat: /srv/secret/../secret/k: No such file or directory", denied,
                               workspace="n") is not None


def test_a_zone_that_takes_no_writes_is_not_said_to_change_through_the_file_api() -> None:
    """Found as a newcomer: a run's write in an `ro` zone ended "a zone's files change through
    `warden fs NAME write PATH`", which then refused ("zone input is ro"); a bot was sent to the file
    API, "which asks a person", and was refused there too. Only the zones that take writes are sent."""
    said = "sh: 1: cannot create input/y: Read-only file system\n"
    person = explain_failure(2, None, said, **FACTS, workspace="zz", read_only_folders=["input", "final"],
                             closed_folders=["input"]) or ""
    assert "the files of /final change through `warden fs zz write PATH`" in person, person
    assert "; /input takes no writes, `warden fs` included" in person and "zones.yaml" in person, person
    alone = explain_failure(2, None, said, **FACTS, workspace="zz", read_only_folders=["input"],
                            closed_folders=["input"]) or ""
    assert "warden fs zz write" not in alone and "/input takes no writes" in alone, alone
    bot = explain_failure(2, None, said, **FACTS, bot=True, workspace="zz", read_only_folders=["input", "final"],
                          closed_folders=["input"]) or ""
    assert "files in /final change through the file API" in bot and "/input takes no writes from you" in bot, bot
    assert "zone" not in bot, bot
    mcp = explain_failure(2, None, said, **FACTS, bot=True, mcp=True, workspace="zz", read_only_folders=["input"],
                          closed_folders=["input"]) or ""
    assert "write_file" not in mcp and "/input takes no writes from you at all" in mcp, mcp


def test_a_removal_refused_by_a_kept_zone_s_landlock_rule_is_explained() -> None:
    """Found as a newcomer: with `drafts: {approval: {delete: blocked}}` declared, `rm x` at the
    workspace's top said only "Permission denied" (Landlock), with no line from Warden."""
    for said in ("rm: cannot remove 'x': Permission denied\n",
                 "PermissionError: [Errno 13] Permission denied: 'x'\n"):
        person = explain_failure(1, None, said, **FACTS, workspace="zz", kept_folders=["drafts"]) or ""
        assert person.startswith("warden: runs of this workspace cannot remove or rename entries in the zones "
                                 "/drafts"), person
        assert "directly in the workspace folder" in person and "`warden fs zz rm PATH`" in person, person
    bot = explain_failure(1, None, "rm: cannot remove 'x': Permission denied\n", **FACTS, bot=True, workspace="zz",
                          kept_folders=["drafts"]) or ""
    assert "DELETE /v1/workspaces/zz/files?path=" in bot, bot
    mcp = explain_failure(1, None, "rm: cannot remove 'x': Permission denied\n", **FACTS, bot=True, mcp=True,
                          workspace="zz", kept_folders=["drafts"]) or ""
    assert "delete_file" in mcp and "/v1/" not in mcp, mcp
    # No such zone, or a command that did not fail: no line.
    assert explain_failure(1, None, "rm: cannot remove 'x': Permission denied\n", **FACTS) is None
    assert explain_failure(0, None, "rm: cannot remove 'x': Permission denied\n", **FACTS,
                           kept_folders=["drafts"]) is None


def test_a_denied_path_s_line_names_the_forget_of_the_level_that_denies_it() -> None:
    """Found as a newcomer: a session's deny was said to be taken back by `warden sandbox forget P
    --workspace W`, which looks in the workspace's lists and answered exit 4."""
    tail = "cat: /srv/data/private/p.txt: No such file or directory\n"
    said = explain_denied_path(tail, ["/srv/data/private"], workspace="w", session="s1",
                               levels=[("/srv/data/private", "session")]) or ""
    assert "`warden sandbox forget /srv/data/private --workspace w --session s1` takes the deny back" in said, said
    assert "`warden sandbox list --workspace w --session s1`" in said, said
    globally = explain_denied_path(tail, ["/srv/data/private"], workspace="w",
                                   levels=[("/srv/data/private", "global"), ("/srv/data/private", "workspace")]) or ""
    assert ("`warden sandbox forget /srv/data/private --workspace w` and `warden sandbox forget /srv/data/private "
            "--level global` take the deny back") in globally, globally


def test_a_silenced_curl_or_wget_without_network_is_named_by_its_status() -> None:
    # `curl -s` (an agent's usual `curl -fsSL`) exits 6 on a name that does not resolve and prints
    # nothing, `wget -q` 4: with no text to match, the status of that program is all there is.
    assert "--net allow" in (explain_failure(6, None, "", **FACTS, program="curl") or "")
    assert "--net allow" in (explain_failure(4, None, "", **FACTS, program="/usr/bin/wget") or "")
    assert explain_failure(6, None, "", **{**FACTS, "network": True}, program="curl") is None  # it had one
    assert explain_failure(22, None, "", **FACTS, program="curl") is None  # an HTTP error: a server answered
    assert explain_failure(6, None, "", **FACTS, program="python") is None  # 6 is curl's word, not python's
