"""The layer store's lock files (`.ID.lock`, `.ID.use`) go with their layer, and a create that
opened one just before a prune removed it still keeps the layer from the next prune.

Real processes and real flocks: a child holds a layer as a create does (`LayerStore.hold`), paused
(its `fcntl.flock` waits for a go file) between opening the lock file and locking it, the very
moment a prune can remove that file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.waiting import wait_until
from warden.adapters.envs.layer_store import LayerStore

_HOLDER = """
import fcntl, sys, time
from pathlib import Path
from warden.adapters.envs.layer_store import LayerStore
root, layer_id, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
real, paused = fcntl.flock, []
def flock(fd, operation):
    if not paused:
        paused.append(fd)
        print("opened", flush=True)
        while not go.exists():
            time.sleep(0.01)
    return real(fd, operation)
fcntl.flock = flock
with LayerStore(Path(root)).hold([layer_id]):
    print("held", flush=True)
    sys.stdin.read()
"""


def _layer(store: LayerStore, layer_id: str) -> None:
    folder = store.path(layer_id)
    folder.mkdir(parents=True)
    (folder / "layer.json").write_text(json.dumps({"id": layer_id, "kind": "python"}))


def _prune(store: LayerStore, layer_id: str) -> bool:
    """What `snapshot prune` does to one unused layer; whether it went."""
    with store.removable(layer_id) as free:
        if free:
            store.remove(layer_id)
    return free


def test_a_pruned_layer_leaves_no_lock_files(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    _layer(store, "L1")
    with store.build_lock("L1"), store.hold(["L1"]):
        pass
    assert {p.name for p in store.root.iterdir()} == {"L1", ".L1.lock", ".L1.use"}
    assert _prune(store, "L1")
    assert list(store.root.iterdir()) == []


def test_a_builder_holding_the_lock_keeps_its_file(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    _layer(store, "L1")
    with store.build_lock("L1"):
        assert _prune(store, "L1")
        assert (store.root / ".L1.lock").exists()
    store.sweep()  # the builder is done: the next sweep takes what the prune left
    assert list(store.root.iterdir()) == []


def test_a_create_that_opened_the_lock_file_as_a_prune_removed_it_still_holds_its_layer(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    _layer(store, "L1")
    go = tmp_path / "go"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(store.root), "L1", str(go)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "opened\n"
        assert _prune(store, "L1")  # the create has not locked yet: the layer goes, its lock file too
        assert not (store.root / ".L1.use").exists()
        go.touch()
        assert holder.stdout.readline() == "held\n"
        # The create builds the layer again and holds it: a prune now must pass over it. Had the
        # create kept its lock on the removed file, this prune would lock a new one and remove it.
        _layer(store, "L1")
        assert not _prune(store, "L1")
        assert store.exists("L1")
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(timeout=30)
    assert holder.returncode == 0
    assert _prune(store, "L1")
    wait_until(lambda: not list(store.root.iterdir()), timeout=5, message="lock files left after the prune")
