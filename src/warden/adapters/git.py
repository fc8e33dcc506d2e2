"""The person's `git`, run hardened on a workspace (core.ports.GitRunner; core/git.py says why).

Every call: the repository's config is read as a file (`git config --file`, which follows no
include and runs nothing) and refused when it names a program; then git runs with the
environment rebuilt (core.git.git_environ), `GIT_DIR`/`GIT_WORK_TREE` naming the person's
`.git` and the workspace, `--no-pager`, and the `-c` pins of core.git.HARDENING. A credential
reaches git only through Warden's helper (adapters/git_credential.py) and variables in the
environment of that one git process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from warden.adapters.atomic import exclusive, write_atomic
from warden.adapters.gitguard import GitGuard
from warden.core.errors import Conflict, Denied, NotFound, TimedOut, TooLarge, Unavailable
from warden.core.git import CREDENTIAL_ENV, HARDENING, forbidden_config, git_environ
from warden.core.ports.git import Credential, GitResult

__all__ = ["SCRATCH_PREFIXES", "HostGit", "helper_command"]

STATE_DIR = ".warden"
# Scratch entries Warden's git leaves in a workspace's `.warden/` while it works, each named
# PREFIX + the pid of the Warden process that made it + "-" + random: the janitor removes those
# whose process is gone (a Warden killed mid-way), adapters/leftovers.py.
SCRATCH_PREFIXES = ("git-checkout-", "git-clone-", "git-index-", "git-objects-")
_MAX_OUTPUT = 64 * 1024 * 1024  # a diff past this is not one a person reads in a terminal
_MAX_ERRORS = 1 << 20  # git's complaints: only their first lines are ever shown


def helper_command(python: str = sys.executable) -> str:
    """The `credential.helper` value: Warden's helper, run by this interpreter in isolated mode
    (no PYTHONPATH, no user site, not the workspace's folder on sys.path). `!` makes git run it
    through the shell; the path is quoted for that shell."""
    import shlex

    return "!" + shlex.join([python, "-I", "-m", "warden.adapters.git_credential"])


def _git_path(workspace: str) -> str:
    return os.path.join(workspace, ".git")


class HostGit:
    """git on this host's workspace folders."""

    def __init__(self, environ: Mapping[str, str], *, git: str | None = None) -> None:
        self._environ = dict(environ)
        found = git or shutil.which("git", path=self._environ.get("PATH") or os.defpath)
        self._git = found
        # workspace -> (the config files' stamps, their entries): repo_config's cache.
        self._configs: dict[str, tuple[tuple[tuple[int, ...] | None, ...], tuple[tuple[str, str], ...]]] = {}

    def _program(self) -> str:
        if self._git is None:
            raise Unavailable("git is not installed on this machine (apt-get install git)")
        return self._git

    # -- the repository -------------------------------------------------------------------
    def has_repository(self, workspace: str) -> bool:
        return GitGuard(workspace).knows(".git")

    def root_entries(self, workspace: str) -> list[str]:
        try:
            return sorted(os.listdir(workspace))
        except FileNotFoundError:
            raise NotFound(f"the folder of workspace {workspace} is missing; see `warden health`") from None

    def write_info(self, workspace: str, name: str, text: str) -> None:
        info = os.path.join(_git_path(workspace), "info")
        os.makedirs(info, mode=0o755, exist_ok=True)
        if os.path.islink(info):
            raise Denied(f"{info} is a link; Warden writes no file through it")
        write_atomic(Path(info, name), text.encode())

    def remove_repository(self, workspace: str) -> None:
        path = _git_path(workspace)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)

    @contextlib.contextmanager
    def scratch_index(self, workspace: str) -> Iterator[str]:
        folder = self._state(workspace)
        fd, path = tempfile.mkstemp(prefix=f"git-index-{os.getpid()}-", dir=folder)
        os.close(fd)
        os.unlink(path)  # git makes it; an empty file is not an index to git
        try:
            yield path
        finally:
            for leftover in (path, path + ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)

    @contextlib.contextmanager
    def scratch_objects(self, workspace: str) -> Iterator[dict[str, str]]:
        """Variables that send the objects git writes to a temporary folder (the repository's own
        readable as alternates, git(1) GIT_OBJECT_DIRECTORY), removed when the block ends: a diff
        of a bot's files leaves no blob in the person's `.git`. Called under `locked`, so any
        other such folder is a leftover of a Warden that was killed: it goes first."""
        state = self._state(workspace)
        for entry in os.listdir(state):
            if entry.startswith("git-objects-"):
                shutil.rmtree(os.path.join(state, entry), ignore_errors=True)
        folder = tempfile.mkdtemp(prefix=f"git-objects-{os.getpid()}-", dir=state)
        try:
            yield {"GIT_OBJECT_DIRECTORY": folder,
                   "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.path.join(_git_path(workspace), "objects")}
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def check_out(self, workspace: str, commit: str, paths: Sequence[str] | None) -> None:
        """Make `paths` of the working tree (None: every path of `commit`) what `commit` holds; a
        path it lacks is removed (never a folder). git never writes the working tree itself (a
        bot's process can swap a folder for a link between git's check and its write, and git
        would write through it, outside the workspace): it checks out into a scratch folder in
        `.warden/` (read-only inside every sandbox, so no bot can race there), through a scratch
        index (the person's is not touched: the caller updates it), and safefs/copyin.py copies
        each entry in by descriptor. The person's index is the caller's to update."""
        from warden.adapters.safefs.copyin import copy_in

        scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIXES[0]}{os.getpid()}-", dir=self._state(workspace))
        try:
            with self.scratch_index(workspace) as index:
                env = {"GIT_INDEX_FILE": index, "GIT_WORK_TREE": scratch}
                self.run(workspace, ["read-tree", commit], extra_env=env)
                listed = [p for p in self.run(workspace, ["ls-files", "-z"], extra_env=env).stdout.split("\0") if p]
                present = set(listed)
                wanted = listed if paths is None else [p for p in paths if p in present]
                if wanted:
                    # Names on stdin, not argv: no pathspec, no length limit (git-checkout-index(1)).
                    self.run(workspace, ["checkout-index", "-f", "-z", "--stdin"], extra_env=env,
                             input="\0".join(wanted))
            copy_in(scratch, workspace, listed if paths is None else sorted(paths))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def strangers(self, workspace: str) -> list[str]:
        return GitGuard(workspace).strangers()

    def persons(self, workspace: str, path: str) -> bool:
        return GitGuard(workspace).owns(path)

    @contextlib.contextmanager
    def locked(self, workspace: str) -> Iterator[None]:
        with exclusive(os.path.join(self._state(workspace), "git.op.lock"), mode=0o644):
            yield

    def _state(self, workspace: str) -> str:
        folder = os.path.join(workspace, STATE_DIR)
        os.makedirs(folder, mode=0o755, exist_ok=True)
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            raise Denied(f"{folder} is not a folder")
        return folder

    def repo_config(self, workspace: str) -> list[tuple[str, str]]:
        """The repository's own config as (key, value), `config` and `config.worktree` (read when
        extensions.worktreeConfig is on): each read as a plain file, no include followed. A
        `commondir` (a linked worktree's pointer to where its config really is) is refused."""
        git_dir = _git_path(workspace)
        if os.path.lexists(os.path.join(git_dir, "commondir")):
            raise Denied("the workspace's .git is a linked worktree (it has a commondir); Warden runs git "
                         "only on a repository whose config it can vet", rule="git.config")
        # Read again only when a config file changed: every git command is vetted, and reading
        # costs a `git config` process per file. The key holds what any write changes (inode,
        # size, mtime, ctime: a rename over it, an edit in place).
        key = tuple(_stamp(os.path.join(git_dir, name)) for name in ("config", "config.worktree"))
        cached = self._configs.get(workspace)
        if cached is not None and cached[0] == key:
            return list(cached[1])
        entries: list[tuple[str, str]] = []
        for name in ("config", "config.worktree"):
            entries += self._config_entries(workspace, os.path.join(git_dir, name))
        self._configs[workspace] = (key, tuple(entries))
        return entries

    def _config_entries(self, workspace: str, config: str) -> list[tuple[str, str]]:
        if not os.path.lexists(config):
            return []
        if os.path.islink(config):
            raise Denied(f"{config} is a link; Warden runs no git beside a repository config it cannot vet",
                         rule="git.config")
        proc = self._spawn(["config", "--no-includes", "--null", "--list", "--file", config], workspace,
                           env=git_environ(self._environ, git_dir=_git_path(workspace), work_tree=workspace),
                           stdin=None, timeout=30)
        if proc.returncode != 0:
            raise Denied(f"the git config of this workspace cannot be read: {_last_line(proc.stderr)}",
                         rule="git.config")
        entries = []
        for item in proc.stdout.split("\0"):
            if item:
                key, _, value = item.partition("\n")
                entries.append((key, value))
        return entries

    def identity(self, workspace: str) -> tuple[str, str]:
        found = dict(self.repo_config(workspace))
        name, email = found.get("user.name"), found.get("user.email")
        home = self._environ.get("HOME")
        if (not name or not email) and home:
            person = self._config_file(os.path.join(home, ".gitconfig"), workspace)
            name, email = name or person.get("user.name"), email or person.get("user.email")
        login = self._environ.get("USER") or self._environ.get("LOGNAME") or "person"
        return name or login, email or f"{login}@{os.uname().nodename}"

    def _config_file(self, path: str, workspace: str) -> dict[str, str]:
        if not os.path.isfile(path):
            return {}
        proc = self._spawn(["config", "--no-includes", "--null", "--list", "--file", path], workspace,
                           env=git_environ(self._environ, git_dir=_git_path(workspace), work_tree=workspace),
                           stdin=None, timeout=30)
        return dict(item.partition("\n")[::2] for item in proc.stdout.split("\0") if item) \
            if proc.returncode == 0 else {}

    def load_state(self, workspace: str) -> dict[str, str]:
        import json

        path = os.path.join(self._state(workspace), "git-remote.json")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        with os.fdopen(fd, "rb") as handle:
            try:
                data = json.loads(handle.read(1 << 16) or b"{}")
            except ValueError:
                return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(data, dict) else {}

    def save_state(self, workspace: str, state: dict[str, str]) -> None:
        import json

        write_atomic(Path(self._state(workspace), "git-remote.json"), json.dumps(state).encode())

    def _vet(self, workspace: str) -> None:
        bad = forbidden_config(self.repo_config(workspace))
        if bad:
            raise Denied(f"the repository's .git/config sets {', '.join(bad)}, which can make git run a "
                         "program; remove them (git config --unset) and try again", rule="git.config")

    # -- running ----------------------------------------------------------------------------
    def _argv(self, args: Sequence[str], credential: Credential | None, workspace: str) -> list[str]:
        argv = [self._program(), "--no-pager"]
        for pin in HARDENING:
            argv += ["-c", pin]
        # Exactly this repository is trusted (git reads safe.directory only from protected
        # config, the command line among them): the one Warden vetted, whoever owns the folder.
        argv += ["-c", f"safe.directory={workspace}"]
        if credential is not None:
            argv += ["-c", f"credential.helper={helper_command()}", "-c", "credential.useHttpPath=false"]
        return argv + list(args)

    def _spawn(self, argv: Sequence[str], workspace: str, *, env: Mapping[str, str], stdin: str | None,
               timeout: float) -> subprocess.CompletedProcess[str]:
        program = list(argv) if argv and argv[0] == self._git else [self._program(), *argv]
        try:
            # Its own session: a timeout or an output past the cap ends git and what it started
            # (a remote helper, ssh, upload-pack of a file:// remote) together.
            proc = subprocess.Popen(program, cwd=workspace, env=dict(env), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
        except FileNotFoundError:
            raise NotFound(f"the folder of workspace {workspace} is missing; see `warden health`") from None
        try:
            out, err = _bounded_output(proc, stdin, timeout, _subcommand(program))
        finally:
            if proc.poll() is None:
                _end(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        return subprocess.CompletedProcess(program, proc.returncode, out.decode("utf-8", "surrogateescape"),
                                           err.decode("utf-8", "surrogateescape"))

    def run(self, workspace: str, args: Sequence[str], *, extra_env: Mapping[str, str] | None = None,
            input: str | None = None, credential: Credential | None = None, check: bool = True,
            timeout: float = 600.0) -> GitResult:
        if not self.has_repository(workspace):
            raise NotFound(f"workspace {os.path.basename(workspace)} holds no .git Warden knows as the person's "
                           "(clone with `warden git NAME clone URL`; a .git made outside Warden counts once a "
                           "run has seen it)")
        self._vet(workspace)
        return self._run(workspace, args, extra_env=extra_env, input=input, credential=credential,
                         check=check, timeout=timeout, git_dir=_git_path(workspace))

    def _run(self, workspace: str, args: Sequence[str], *, extra_env: Mapping[str, str] | None,
             input: str | None, credential: Credential | None, check: bool, timeout: float,
             git_dir: str | None) -> GitResult:
        extra = dict(extra_env or {})
        if credential is not None:
            extra.update(zip(CREDENTIAL_ENV, (credential.username, credential.password, credential.where),
                             strict=True))
        env = git_environ(self._environ, git_dir=git_dir or "", work_tree=workspace, extra=extra)
        if git_dir is None:  # `git clone` places its own (and refuses a GIT_WORK_TREE that exists)
            del env["GIT_DIR"], env["GIT_WORK_TREE"]
        proc = self._spawn(self._argv(args, credential, workspace), workspace, env=env, stdin=input, timeout=timeout)
        result = GitResult(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            said = _in_workspace(_last_line(proc.stderr), workspace)
            raise GitFailed(f"git {args[0]} failed: {said or f'exit status {proc.returncode}'}", result)
        return result

    def clone(self, workspace: str, url: str, branch: str | None, credential: Credential | None) -> None:
        """Clone beside, in the workspace's `.warden/` (the same filesystem), with no checkout and
        no template (no sample hooks), then move its `.git` to the root and adopt it."""
        target = _git_path(workspace)
        if os.path.lexists(target):
            raise Conflict(f"workspace {os.path.basename(workspace)} already holds a .git")
        scratch = tempfile.mkdtemp(prefix=f"git-clone-{os.getpid()}-", dir=self._state(workspace))
        try:
            inner = os.path.join(scratch, "repo")
            args = ["clone", "--no-checkout", "--template=", "--no-recurse-submodules",
                    "--upload-pack=git-upload-pack", "--quiet"]
            if branch:
                args += ["--branch", branch]
            self._run(scratch, [*args, "--", url, inner], extra_env={}, input=None, credential=credential,
                      check=True, timeout=3600, git_dir=None)
            _move_in(inner, workspace)
        except GitFailed as exc:
            raise GitFailed(f"git clone of {url} failed: {exc.message.partition(': ')[2]}", exc.result) from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        GitGuard(workspace).adopt(".git")


class GitFailed(Conflict):
    """git itself refused or failed; the message holds its own word (the state it found is
    the conflict: a remote unreachable, a path in the way)."""

    def __init__(self, message: str, result: GitResult) -> None:
        super().__init__(message, rule="git")
        self.result = result


def _stamp(path: str) -> tuple[int, ...] | None:
    """What a write to file `path` changes (None: no such file)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _in_workspace(text: str, workspace: str) -> str:
    """`text` with the workspace's host path named as the file API names it (`/.git`): git says
    `not a git repository: '/root/.warden/workspaces/W/.git'`, and bots read these messages,
    which must not tell them Warden's home or the person's."""
    root = workspace.rstrip("/")
    return text.replace(root + "/", "/").replace(root, "/") if root else text


def _last_line(text: str) -> str:
    """git's own complaint in one line: its first `fatal:`/`error:` line, else its last word."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("hint:")]
    said = [line for line in lines if line.startswith(("fatal:", "error:"))] or lines[-1:]
    return said[0][:400] if said else ""


def _move_in(clone: str, workspace: str) -> None:
    """The clone's `.git` to the workspace root, by descriptors and never over an entry: a clone
    may take an hour, and a bot's process could have made a `.git` there meanwhile."""
    import errno

    from warden.adapters.safefs.rename import renameat_noreplace

    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    src, dst = os.open(clone, flags), os.open(workspace, flags)
    try:
        renameat_noreplace(src, ".git", dst, ".git")
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise Conflict(f"workspace {os.path.basename(workspace)} came to hold a .git during the clone; "
                           "nothing was moved in") from None
        raise Conflict(f"the clone could not be moved into workspace {os.path.basename(workspace)}: "
                       f"{exc.strerror}") from None
    finally:
        os.close(src)
        os.close(dst)


def _bounded_output(proc: subprocess.Popen[bytes], stdin: str | None, timeout: float,
                    command: str) -> tuple[bytes, bytes]:
    """(stdout, stderr) of `proc`, read as it writes them and bounded while read: past
    _MAX_OUTPUT of stdout git is ended and TooLarge raised (a diff or a log of a huge tree never
    fills Warden's memory first); stderr keeps its first _MAX_ERRORS bytes. Past `timeout`,
    TimedOut. `stdin` is written from a thread, so a git that answers while it reads never
    blocks on a full pipe."""
    import selectors
    import threading
    import time

    if stdin is not None:
        data = stdin.encode("utf-8", "surrogateescape")
        assert proc.stdin is not None
        pipe = proc.stdin

        def feed() -> None:
            # git stopped reading (it ended, or was ended and its pipe closed under this thread).
            with contextlib.suppress(OSError, ValueError):
                pipe.write(data)
                pipe.close()

        threading.Thread(target=feed, name="git-stdin", daemon=True).start()
    assert proc.stdout is not None and proc.stderr is not None
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    out, err = buffers[proc.stdout.fileno()], buffers[proc.stderr.fileno()]
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut(f"git {command} took longer than {timeout:g}s")
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buffer = buffers[key.fd]
                if buffer is err:
                    err += chunk[: max(0, _MAX_ERRORS - len(err))]
                    continue
                out += chunk
                if len(out) > _MAX_OUTPUT:
                    raise TooLarge(f"git {command} printed more than {_MAX_OUTPUT >> 20} MiB; Warden stopped it "
                                   "(look at the workspace with git yourself)")
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise TimedOut(f"git {command} took longer than {timeout:g}s") from None
    return bytes(out), bytes(err)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End git and everything in its session."""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def _subcommand(argv: Sequence[str]) -> str:
    """The git command an argv runs (`config`, `clone`, …), past the program and its -c options."""
    words = iter(argv[1:])
    for word in words:
        if word == "-c":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return "(no command)"
