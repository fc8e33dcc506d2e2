"""Checkpoint and rollback of a workspace against `cp -a` and `git stash`, same tree, same run.

    .venv/bin/python bench/checkpoint.py [--files 10000] [--mb 200]

The tree: `--files` files of random bytes (incompressible, so git's zlib gains nothing and loses
nothing) totalling `--mb` MB in folders of 100, plus a few symlinks and empty folders. Each tool
works on its own copy of it, on the same filesystem:
- checkpoint: `CheckpointService.create` (what `warden checkpoint` runs, without the CLI's
  start-up); `cp -a tree backup`; `git add -A && git stash` in a repository with one empty commit;
- again, unchanged: a second checkpoint of the same tree (the stat stamps of the first let it skip
  reading the files; git's index does the same for `git add -A`, but `git stash` has nothing to
  save then, so it is not comparable);
- rollback after a change (1% of the files rewritten, 1% deleted, 1% added): `rollback` (which
  first saves the changed tree as a checkpoint of its own); `rm -rf tree && cp -a backup tree`;
  `git reset --hard && git clean -fdq && git stash apply`.
Target (issue 13): checkpoint ≤ git stash.

    .venv/bin/python bench/checkpoint.py --deep 4000

A deep tree instead: a chain of `--deep` nested folders, each level holding the next one and a
sibling folder with one small file, beside a flat tree of as many files (folders of 100), both
checkpointed in the same run. The walk keeps only so many folders open, so going back up the
chain must reopen them; it should cost about the same per file as the flat tree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_home  # noqa: E402

GIT = ["git", "-c", "core.hooksPath=/dev/null", "-c", "user.name=bench", "-c", "user.email=bench@localhost",
       "-c", "gc.auto=0", "-c", "maintenance.auto=false"]


def make_tree(root: Path, files: int, total: int) -> None:
    size = total // files
    for i in range(files):
        folder = root / f"d{i // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:05d}.bin").write_bytes(os.urandom(size))
    for i in range(10):
        os.symlink(f"d000/f{i:05d}.bin", root / f"link{i}")
        (root / f"empty{i}").mkdir()


def change(root: Path, files: int) -> None:
    """Rewrite 1% of the files, delete 1%, add 1%."""
    step = 100
    for i in range(0, files, step):
        path = root / f"d{i // 100:03d}" / f"f{i:05d}.bin"
        path.write_bytes(os.urandom(path.stat().st_size))
        (root / f"d{(i + 1) // 100:03d}" / f"f{i + 1:05d}.bin").unlink()
        (root / f"d{i // 100:03d}" / f"new{i:05d}.bin").write_bytes(os.urandom(4096))


def make_deep(root: Path, depth: int) -> None:
    """`depth` nested folders `a`, each beside a folder `b` holding one file; made by descriptor
    (the chain's paths are far past PATH_MAX)."""
    root.mkdir(parents=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(depth):
            os.mkdir("b", dir_fd=fd)
            side = os.open("b", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            out = os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=side)
            os.write(out, b"%d\n" % i)
            os.close(out)
            os.close(side)
            os.mkdir("a", dir_fd=fd)
            nxt = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def deep_vs_flat(depth: int) -> None:
    sys.path.insert(0, str(REPO / "src"))
    from warden.bootstrap import bootstrap
    from warden.core.workspaces import WorkspaceRecord

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        base = Path(tmp)
        home, env = bench_home(tmp)
        env["WARDEN_WORKSPACE_MAX_DISK"] = "100G"
        env["WARDEN_WORKSPACE_MAX_FILES"] = "10000000"
        app = bootstrap(home, environ=env)
        rows: list[tuple[str, float]] = []
        try:
            for label, make in ((f"flat, {depth:,} files", lambda f: make_tree(f, depth, depth * 4)),
                                (f"{depth:,}-deep chain, {depth:,} files", lambda f: make_deep(f, depth))):
                name = "deep" if "deep" in label else "flat"
                folder = base / "workspaces" / name
                make(folder)
                record = WorkspaceRecord(id=f"ws_{name}", name=name, path=str(folder), type="user", status="ready",
                                         created_at="2026-01-01T00:00:00+00:00",
                                         last_accessed="2026-01-01T00:00:00+00:00")
                with app.registry.transaction() as tx:
                    tx.workspaces.insert(record)
                sync()
                rows.append((f"checkpoint, {label}", timed(lambda r=record: app.checkpoints.create(r, "bench"))))
                rows.append((f"scan for a rollback, {label}",
                             timed(lambda f=folder: app.checkpoints.store.scan(str(f), None))))
        finally:
            app.close()
            subprocess.run(["rm", "-rf", str(base / "workspaces")], check=False)  # deeper than rmtree recurses
    print(f"{'operation':<52}{'warden':>10}")
    for label, seconds in rows:
        print(f"{label:<52}{seconds:>8.2f} s")


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(argv: list[str], cwd: Path) -> None:
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def sync() -> None:
    """Flush dirty pages between steps, so no step pays for the one before it."""
    os.sync()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--deep", type=int, default=0, help="compare a chain this deep with a flat tree instead")
    args = parser.parse_args()
    if args.deep:
        deep_vs_flat(args.deep)
        return
    sys.path.insert(0, str(REPO / "src"))
    from warden.bootstrap import bootstrap
    from warden.core.workspaces import WorkspaceRecord

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        base = Path(tmp)
        home, env = bench_home(tmp)
        env["WARDEN_WORKSPACE_MAX_DISK"] = "100G"
        app = bootstrap(home, environ=env)
        try:
            folder = base / "workspaces" / "bench"
            make_tree(folder, args.files, args.mb << 20)
            record = WorkspaceRecord(id="ws_bench", name="bench", path=str(folder), type="user", status="ready",
                                     created_at="2026-01-01T00:00:00+00:00",
                                     last_accessed="2026-01-01T00:00:00+00:00")
            with app.registry.transaction() as tx:
                tx.workspaces.insert(record)
            app.quota.usage(str(folder))  # warm the registry and the first walk's imports
            git_tree = base / "git" / "tree"
            cp_tree = base / "cp" / "tree"
            for copy in (git_tree, cp_tree):
                copy.parent.mkdir(parents=True)
                subprocess.run(["cp", "-a", str(folder), str(copy)], check=True)
            run([*GIT, "init", "-q"], git_tree)
            run([*GIT, "commit", "-q", "--allow-empty", "-m", "empty"], git_tree)
            time.sleep(2.5)  # the files' stat stamps become stable (core/checkpoints.py STABLE_NS)
            sync()

            rows: list[tuple[str, float | None, float | None, float | None]] = []
            made: list[str] = []
            t_ck = timed(lambda: made.append(app.checkpoints.create(record, "bench").id))
            sync()
            t_cp = timed(lambda: run(["cp", "-a", "tree", "backup"], cp_tree.parent))
            sync()
            t_git = timed(lambda: (run([*GIT, "add", "-A"], git_tree), run([*GIT, "stash", "-q"], git_tree)))
            sync()
            rows.append(("checkpoint", t_ck, t_cp, t_git))
            run([*GIT, "stash", "apply", "-q"], git_tree)  # the git copy back to the tree, untimed
            sync()
            t_again = timed(lambda: app.checkpoints.create(record, "again"))
            rows.append(("checkpoint again, unchanged", t_again, None, None))

            for tree in (folder, cp_tree, git_tree):
                change(tree, args.files)
            sync()
            t_rb = timed(lambda: app.checkpoints.rollback(record, made[0]))
            sync()
            t_cp_rb = timed(lambda: (shutil.rmtree(cp_tree),
                                     run(["cp", "-a", "backup", "tree"], cp_tree.parent)))
            sync()
            t_git_rb = timed(lambda: (run([*GIT, "reset", "-q", "--hard"], git_tree),
                                      run([*GIT, "clean", "-fdq"], git_tree),
                                      run([*GIT, "stash", "apply", "-q"], git_tree)))
            rows.append(("rollback after a 3% change", t_rb, t_cp_rb, t_git_rb))
            store = app.checkpoints.store.measure("bench")
        finally:
            app.close()

    print(f"tree: {args.files:,} files, {args.mb} MB (+10 symlinks, 10 empty folders); "
          f"store after the run: {store / (1 << 20):.0f} MB\n")
    print(f"{'operation':<30}{'warden':>10}{'cp -a':>10}{'git stash':>12}")
    for name, *cells in rows:
        print(f"{name:<30}" + "".join(f"{(f'{c:.2f} s' if c is not None else '-'):>{w}}"
                                       for c, w in zip(cells, (10, 10, 12), strict=True)))


if __name__ == "__main__":
    main()
