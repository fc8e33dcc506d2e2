"""Workspace leases, the pure model: who may hold a workspace, fencing, expiry, dead holders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from warden.core.errors import Locked
from warden.core.leases import Holder, LeaseState, acquire, from_json, live, release, renew, to_json

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)


def holder(n: int, node: str = "a", op: str = "run") -> Holder:
    return Holder(f"h{n}", node, 1000 + n, 5, op)


def everyone_alive(_: Holder) -> bool | None:
    return True


def test_runs_share_and_lifecycle_changes_are_alone() -> None:
    state = LeaseState("w")
    state = acquire(state, holder(1), "shared", NOW, TTL, everyone_alive)
    state = acquire(state, holder(2), "shared", NOW, TTL, everyone_alive)
    with pytest.raises(Locked, match=r"in use \(run by pid 1001 on a\)"):
        acquire(state, holder(3, op="archive"), "exclusive", NOW, TTL, everyone_alive)
    state = release(release(state, "h1"), "h2")
    state = acquire(state, holder(3, op="archive"), "exclusive", NOW, TTL, everyone_alive)
    assert state.fence == 1
    with pytest.raises(Locked, match=r"busy \(archive by pid 1003"):
        acquire(state, holder(4), "shared", NOW, TTL, everyone_alive)
    with pytest.raises(Locked):
        acquire(state, holder(5, op="destroy"), "exclusive", NOW, TTL, everyone_alive)


def test_a_drainer_waits_out_runs_but_stops_new_ones() -> None:
    state = acquire(LeaseState("w"), holder(1), "shared", NOW, TTL, everyone_alive)
    state = acquire(state, holder(2, op="destroy"), "draining", NOW, TTL, everyone_alive)
    with pytest.raises(Locked, match="busy"):
        acquire(state, holder(3), "shared", NOW, TTL, everyone_alive)
    with pytest.raises(Locked):
        acquire(state, holder(2, op="destroy"), "exclusive", NOW, TTL, everyone_alive)  # the run is still there
    state = release(state, "h1")
    state = acquire(state, holder(2, op="destroy"), "exclusive", NOW, TTL, everyone_alive)
    assert [h.mode for h in state.held] == ["exclusive"] and state.fence == 1


def test_expired_and_dead_holders_are_taken_over_with_a_new_fence() -> None:
    state = acquire(LeaseState("w", fence=7), holder(1, op="create"), "exclusive", NOW, TTL, everyone_alive)
    assert state.fence == 8
    later = NOW + TTL + timedelta(seconds=1)
    taken = acquire(state, holder(2, op="repair"), "exclusive", later, TTL, everyone_alive)
    assert taken.fence == 9 and [h.holder.id for h in taken.held] == ["h2"]
    # A holder known dead (its pid gone) is taken over at once; one on another node only by expiry.
    dead = acquire(state, holder(3), "shared", NOW, TTL, lambda h: False)
    assert [h.holder.id for h in dead.held] == ["h3"]
    with pytest.raises(Locked):
        acquire(state, holder(3), "shared", NOW, TTL, lambda h: None)


def test_renew_and_round_trip() -> None:
    state = acquire(LeaseState("w"), holder(1), "shared", NOW, TTL, everyone_alive)
    assert renew(state, "nobody", NOW, TTL) is None
    renewed = renew(state, "h1", NOW + timedelta(seconds=30), TTL)
    assert renewed is not None and live(renewed, NOW + timedelta(seconds=80), everyone_alive).held
    again = from_json("w", renewed.fence, to_json(renewed))
    assert again == renewed
    assert from_json("w", 0, [{"mode": "bogus"}, "x", {"mode": "shared", "expires": "not a time",
                                                         "holder": {}}]).held == ()
