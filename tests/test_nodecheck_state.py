"""node-check's state (burnin/nodecheck/state.py, keep.py) as a real process: a directory of
its own that another local user cannot own, write or plant links in; a state file of the
wrong shape said and started over from; a crafted cursor that would hide XIDs refused; a
state from another boot dropped; the kernel log's span judged once a boot; last_good kept
only from a clean run. The second user is a real account (support/localuser.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from support.localuser import as_user, local_user, reachable_dir
from test_nodecheck import kernel_line, make_inventory, node_check

from burnin.nodecheck import state, storage
from burnin.nodecheck.budget import remaining


def doc(res) -> dict:
    assert "Traceback" not in res.stderr, res.stderr
    return json.loads(res.stdout)


def lines(res) -> list[str]:
    """Every failure the run reported, `check: text`, wherever it was found."""
    d = doc(res)
    return [f"{f.get('check', c['check'])}: {f['text']}" for c in d["checks"]
            for f in c["findings"] if not f["warn"]] + [
        f"{o['check']}: {o['text']}" for o in d["other"] if not o["warn"]]


def states(res) -> list[str]:
    return [x for x in lines(res) if "node-check's state" in x or "node-check's cursor" in x]


def kept(tmp: Path) -> dict:
    return json.loads((tmp / "state" / state.FILE).read_text())


def xid_log(tmp: Path, *events: tuple[float, int]) -> Path:
    log = tmp / "kern.log"
    log.write_text("[    0.000000] Linux version 6.1\n" + "".join(
        kernel_line(t, "0000:3b:00", code, "x.") for t, code in events))
    return log


def inventory_with_log(tmp: Path, log: Path, **kw) -> Path:
    return make_inventory(tmp, checks={"health": {"kernel_log": str(log)}}, **kw)


def write_state(tmp: Path, **fields) -> None:
    (tmp / "state").mkdir(mode=0o700, exist_ok=True)
    body = {"version": 1, "boot_id": state.boot_id(), "cursor": None, "held": [],
            "last_good": {}, **fields}
    (tmp / "state" / state.FILE).write_text(json.dumps(body))


def test_the_state_directory_is_made_0700_and_its_files_are_private(tmp_path):
    res = node_check(make_inventory(tmp_path), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    where = tmp_path / "state"
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    assert sorted(p.name for p in where.iterdir()) == [state.FILE, state.LOCK]
    for p in where.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert kept(tmp_path)["boot_id"] == state.boot_id()


@pytest.fixture
def shared_tmp():
    """A directory another local user can reach (pytest's own are root's, 0700)."""
    with reachable_dir() as where:
        yield where


def test_a_state_directory_another_user_owns_or_can_write_is_said_and_never_used(shared_tmp):
    tmp_path = shared_tmp
    victim = tmp_path / "victim"
    victim.write_text("root's own file\n")
    victim.chmod(0o600)
    made = tmp_path / "made-by-root"
    with local_user() as (uid, gid):
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, uid, gid)
        for name, target in ((state.LOCK, made), (state.FILE, victim)):
            done = as_user(uid, gid, ["ln", "-s", str(target), str(theirs / name)])
            assert done.returncode == 0, done.stderr
        res = node_check(make_inventory(tmp_path, node_check={"state_dir": str(theirs)}),
                         "--json")
        assert res.returncode == 1
        assert states(res) == [f"state: node-check's state cannot be read: state directory "
                               f"{theirs} is not node-check's own: {theirs} is owned by uid "
                               f"{uid} ({__import__('pwd').getpwuid(uid).pw_name}); not used "
                               f"(fix: chown 0 and chmod 700 it, or remove it and node-check "
                               f"makes its own)"], lines(res)

        open_dir = tmp_path / "open"
        open_dir.mkdir()
        open_dir.chmod(0o777)
        done = as_user(uid, gid, ["ln", "-s", str(made), str(open_dir / state.LOCK)])
        assert done.returncode == 0, done.stderr
        res = node_check(make_inventory(tmp_path, node_check={"state_dir": str(open_dir)}),
                         "--json")
        assert res.returncode == 1
        assert len(states(res)) == 1 and f"{open_dir} is writable by group or others " \
            "(mode 777)" in states(res)[0], lines(res)
    assert victim.read_text() == "root's own file\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not made.exists()


def test_a_link_in_the_state_directory_is_never_followed(tmp_path):
    where = tmp_path / "state"
    where.mkdir(mode=0o700)
    made = tmp_path / "made-through-a-link"
    (where / state.LOCK).symlink_to(made)
    res = node_check(make_inventory(tmp_path), "--json")
    assert res.returncode == 1 and not made.exists()
    assert len(states(res)) == 1 and "node-check.lock" in states(res)[0], lines(res)

    (where / state.LOCK).unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"version": 1, "boot_id": state.boot_id(), "cursor": 1.0,
                                     "held": [], "last_good": {}}))
    (where / state.FILE).symlink_to(elsewhere)
    res = node_check(make_inventory(tmp_path), "--json")
    assert res.returncode == 1
    assert len(states(res)) == 1 and "cannot be read" in states(res)[0], lines(res)
    assert json.loads(elsewhere.read_text())["cursor"] == 1.0  # read and written: neither
    assert not (where / state.FILE).is_symlink()  # replaced by node-check's own file


@pytest.mark.parametrize("body, said", [
    ('{"held": 5}', "version None, expected 1"),
    ('{"version": 1, "boot_id": "", "cursor": null, "held": [], "last_good": {}, "x": 1}',
     "keys"),
    (None, "held is not a list"),
    ("last_good", "last_good is not a mapping"),
    ('{"version": 1, "boot_id": "', "is not JSON"),
    ("[1, 2]", "not a JSON object"),
    ("cursor", "cursor 'x' is not a time since boot"),
    ("\xff", "is not JSON"),
])
def test_a_state_file_of_the_wrong_shape_is_said_and_started_over_from(tmp_path, body, said):
    log = xid_log(tmp_path, (100.0, 48))
    if body is None:
        write_state(tmp_path, held=5)
    elif body == "last_good":
        write_state(tmp_path, last_good="x")
    elif body == "cursor":
        write_state(tmp_path, cursor="x")
    else:
        (tmp_path / "state").mkdir(mode=0o700)
        (tmp_path / "state" / state.FILE).write_bytes(body.encode("latin-1"))
    res = node_check(inventory_with_log(tmp_path, log), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    found = lines(res)
    assert [x for x in found if x.startswith("state: ")] == [
        x for x in found if x.startswith("state: node-check's state is invalid, started over "
                                         "from boot: ")] and said in " ".join(found), found
    # started over: the XID since boot is read again; and the state is node-check's again,
    # holding both, so that a drain for them waits for a person
    assert any("XID 48" in x for x in found), found
    said = [o for o in doc(res)["other"] if o["check"] == "state"]
    assert said and all(o["event"] for o in said)  # an event: its drain held for a person
    after = kept(tmp_path)
    assert after["cursor"] == 100.0 and len(after["held"]) == 2, after
    assert any(h.startswith("state: ") for h in after["held"])


def test_a_crafted_cursor_past_the_logs_end_cannot_hide_an_xid(tmp_path):
    # The real boot id and a cursor of 1e12: every XID would be "old" for 31,000 years.
    log = xid_log(tmp_path, (100.0, 48))
    write_state(tmp_path, cursor=1e12)
    res = node_check(inventory_with_log(tmp_path, log), "--json")
    assert res.returncode == 1
    found = lines(res)
    assert any(x.startswith("xid: GPU at PCI 0000:3b:00: XID 48") for x in found), found
    assert states(res) == ["state: node-check's cursor 1e+12 s is past the kernel log's end "
                           "(100 s): read from boot again"], found
    assert kept(tmp_path)["cursor"] == 100.0  # not merged back from the file
    assert node_check(inventory_with_log(tmp_path, log), "--json").returncode == 0


def test_a_state_from_another_boot_keeps_only_last_good(tmp_path):
    log = xid_log(tmp_path, (100.0, 48), (200.0, 13))
    write_state(tmp_path, boot_id="another-boot", cursor=150.0, held=["xid: old event"],
                last_good={"cpus": 1})
    res = node_check(inventory_with_log(tmp_path, log), "--json")
    found = lines(res)
    assert any(x.startswith("xid: GPU at PCI 0000:3b:00: XID 48") for x in found), found
    assert not states(res), found
    after = kept(tmp_path)
    assert "xid: old event" not in after["held"] and after["cursor"] == 200.0


def test_the_kernel_logs_span_is_judged_on_the_first_read_of_a_boot_only(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("[   50.000000] the ring buffer lost what came before\n")
    inv = inventory_with_log(tmp_path, log)

    def span(res) -> list[str]:
        return [f["text"] for c in doc(res)["checks"] for f in c["findings"]
                if "not from boot" in f["text"]]
    first = node_check(inv, "--json")
    assert len(span(first)) == 1, first.stdout
    with log.open("a") as f:
        f.write("[   60.000000] later\n")
    assert span(node_check(inv, "--json")) == []


def test_last_good_is_kept_from_a_clean_run_only(tmp_path, nvml):
    inv = make_inventory(tmp_path, {"gpus": "auto"})
    nvml(devices=[{}, {}])
    assert node_check(inv).returncode == 0
    assert kept(tmp_path)["last_good"]["gpus"] == 2
    # a GPU lost while something else fails too: the count it saw is no new baseline
    nvml(devices=[{}])
    broken = make_inventory(tmp_path, {"gpus": "auto",
                                       "storage": {"path": str(tmp_path / "no" / "such")}})
    assert node_check(broken).returncode == 1
    assert kept(tmp_path)["last_good"]["gpus"] == 2
    res = node_check(make_inventory(tmp_path, {"gpus": "auto"}), "--json")
    assert "gpu: GPU count is 1, the last clean node-check saw 2" in lines(res)


def test_storage_output_that_cannot_be_read_is_a_finding(tmp_path, monkeypatch):
    import time
    monkeypatch.setattr(storage, "CHILD", "print('not the document')")
    result = storage.check(str(tmp_path), None, "n1", time.monotonic() + 30)
    assert [f.text for f in result.failures] == ["its check exited 0: no output"]
    monkeypatch.setattr(storage, "CHILD", "import sys; sys.exit('it broke')")
    result = storage.check(str(tmp_path), None, "n1", time.monotonic() + 30)
    assert [f.text for f in result.failures] == ["its check exited 1: it broke"]
    assert remaining(time.monotonic() - 1) == 0.05
