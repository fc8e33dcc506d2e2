"""The result of one sandboxed command."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunResult", "explain_failure"]


@dataclass(frozen=True)
class RunResult:
    """What a sandboxed command did: its status, output and how it ended."""

    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    signal: int | None = None
    # The quota setting that stopped the run (workspace.max_disk, ...); not in the JSON, whose
    # stderr already ends with the note saying so.
    stopped_by: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr,
                "duration_s": round(self.duration_s, 6), "timed_out": self.timed_out,
                "signal": self.signal}


# What a program prints when it needs the network and has none (pip, uv, npm, curl, git, Python).
_NO_NETWORK = ("Network is unreachable", "Temporary failure in name resolution", "Could not resolve host",
               "Name or service not known", "getaddrinfo EAI_AGAIN", "getaddrinfo ENOTFOUND",
               "No address associated with hostname", "nodename nor servname")
_SIGXFSZ = 25


def explain_failure(exit_code: int, signal: int | None, stderr_tail: str, *, oom_killed: bool,
                    network: bool, max_file_mb: int, memory: int) -> str | None:
    """One line saying what Warden's sandbox had to do with a failed command, or None.

    A command that fails inside the sandbox says so in its own words (`bwrap: execvp pyhton`,
    "File too large", a DNS error); this names the limit or the missing piece behind it and
    the setting or flag that changes it. Pure: the caller passes the facts.
    """
    last = stderr_tail.strip().rsplit("\n", 1)[-1] if stderr_tail.strip() else ""
    if exit_code in (126, 127) and last.startswith("bwrap: execvp "):
        program = last.removeprefix("bwrap: execvp ").rsplit(":", 1)[0]
        if exit_code == 127:
            return (f"warden: {program} is not in the sandbox (it sees /usr, /bin and the workspace's "
                    ".venv/bin and node_modules/.bin); `warden install` adds Python or Node packages")
        return f"warden: {program} is not executable inside the sandbox"
    if signal == _SIGXFSZ or "File too large" in stderr_tail:
        return (f"warden: a file reached the sandbox's size limit ({max_file_mb} MB, "
                "sandbox.max_file_size_mb); `warden config set sandbox.max_file_size_mb N` raises it")
    if oom_killed:
        return (f"warden: the command ran out of memory (limit {memory >> 20} MiB); run it with "
                "--memory SIZE or set sandbox.memory")
    if not network and exit_code != 0 and any(text in stderr_tail for text in _NO_NETWORK):
        return ("warden: the sandbox has no network; run with --net allow --allow-domain HOST "
                "(or `warden install` for packages)")
    return None
