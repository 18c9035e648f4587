"""A partition replayed in a process of its own shows its progress as a restore from the
changelog does (``/health``'s ``restoring``, ``streamiq status``): records read of the
end, bytes, rate and time left; thousandths read in the heartbeats' report."""

from __future__ import annotations

from streamiq.serving.changelog.partition import Replaying


def test_a_replay_reports_records_read_of_its_end() -> None:
    r = Replaying(end=1000)
    assert r.permil() == 0 and r.progress(r.started + 1)["eta_s"] is None  # nothing read
    r.offset, r.bytes = 250, 9000
    got = r.progress(r.started + 2.0)
    assert (got["records"], got["bytes"], got["remaining"], got["rate"], got["eta_s"]) == (
        250, 9000, 750, 125.0, 6.0)
    assert r.permil() == 250
    r.offset = 1200  # read past the end asked (the changelog grew meanwhile)
    assert r.permil() == 1000 and r.progress()["remaining"] == 0
    assert Replaying(end=0).permil() == 0
