"""Run as root, node-check and `burnin run` trust only root's files: an inventory, or an
executable it names (node_check.scontrol, checks.dcgm.dcgmi, a command hook), that another
local user owns or that group or others can write is refused, with how to fix it, and
never run. The other user is a real account (support/localuser.py)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys

import yaml
from support.localuser import local_user, reachable_dir
from test_nodecheck import ROOT, make_inventory, node_check

FIX = "fix: chown root:root on it and on the directories above it, and chmod go-w"


def said(res: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr  # one line, in slurmd's log
    return lines[0]


def burnin_run(inv, cwd) -> subprocess.CompletedProcess:
    """`burnin run` as far as its collection: where the inventory is read and judged."""
    return subprocess.run([sys.executable, "-m", "burnin", "run", "--inventory", str(inv),
                           "-p", "no:cacheprovider", "--co", "-q"], capture_output=True,
                          text=True, cwd=cwd, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def script(path, marker, body: str = "") -> str:
    path.write_text(f"#!/bin/sh\ntouch {marker}\n{body}")
    path.chmod(0o755)
    return str(path)


def test_an_inventory_another_user_owns_or_can_change_is_refused(tmp_path):
    with local_user() as (uid, gid), reachable_dir() as shared:
        name = pwd.getpwuid(uid).pw_name
        inv = make_inventory(tmp_path)
        os.chown(inv, uid, gid)
        line = said(res := node_check(inv, "--mode", "health"))
        assert res.returncode == 2
        assert line.startswith(f"burnin node-check: invalid inventory: {inv}: refusing the "
                               f"inventory {inv} as root: {inv} is owned by uid {uid} "
                               f"({name})"), line
        assert FIX in line
        run = burnin_run(inv, tmp_path)
        assert run.returncode == 4 and f"{inv} is owned by uid {uid}" in run.stdout + \
            run.stderr, run.stdout + run.stderr

        os.chown(inv, 0, 0)
        inv.chmod(0o666)
        line = said(res := node_check(inv))
        assert res.returncode == 2 and f"{inv} is writable by group or others (mode 666)" \
            in line, line
        inv.chmod(0o644)
        assert node_check(inv).returncode == 0

        # root's file in a directory the other user owns: they can swap it
        theirs = shared / "theirs"
        theirs.mkdir()
        moved = theirs / "inventory.yaml"
        moved.write_text(inv.read_text())
        os.chown(theirs, uid, gid)
        line = said(res := node_check(moved))
        assert res.returncode == 2 and f"{theirs} is owned by uid {uid}" in line, line

        # root's file in root's directory, reached through a link the other user owns
        link = shared / "inventory.yaml"
        link.symlink_to(inv)
        os.lchown(link, uid, gid)
        line = said(res := node_check(link))
        assert res.returncode == 2 and f"{link} is a symbolic link owned by uid {uid}" \
            in line, line
        os.lchown(link, 0, 0)
        assert node_check(link).returncode == 0


def test_an_executable_the_inventory_names_is_run_only_if_root_alone_can_change_it(tmp_path):
    ran = tmp_path / "ran"
    with local_user() as (uid, gid), reachable_dir() as shared:
        scontrol = script(shared / "scontrol", ran, "exit 1\n")
        os.chown(scontrol, uid, gid)
        inv = make_inventory(tmp_path, node_check={"scontrol": scontrol})
        line = said(res := node_check(inv, "--mode", "health"))
        assert res.returncode == 2, res.stdout + res.stderr
        assert f"refusing node_check.scontrol {scontrol} as root: {scontrol} is owned by " \
               f"uid {uid}" in line and FIX in line, line
        assert not ran.exists()

        dcgmi = script(shared / "dcgmi", ran, "exit 1\n")
        os.chmod(dcgmi, 0o777)
        inv = make_inventory(tmp_path, checks={"dcgm": {"dcgmi": dcgmi}})
        line = said(res := node_check(inv))
        assert res.returncode == 2
        assert f"refusing checks.dcgm.dcgmi {dcgmi} as root: {dcgmi} is writable by group " \
               f"or others (mode 777)" in line, line
        assert not ran.exists()

        hook = script(shared / "hook", ran)
        os.chown(hook, uid, gid)
        inv = make_inventory(tmp_path)
        doc = yaml.safe_load(inv.read_text())
        doc["quarantine"] = {"actions": ["command"], "command": [hook, "{node}"]}
        inv.write_text(yaml.safe_dump(doc))
        run = burnin_run(inv, tmp_path)
        out = run.stdout + run.stderr
        assert run.returncode == 4, out
        assert f"quarantine.command: refusing the command hook {hook} as root: {hook} is " \
               f"owned by uid {uid}" in out and FIX in out, out
        assert not ran.exists()


def test_the_way_to_a_file_is_followed_through_relative_links_and_dot_dot(tmp_path):
    from burnin.core.rootfiles import untrusted
    real = tmp_path / "etc" / "burnin"
    real.mkdir(parents=True)
    (real / "inventory.yaml").write_text("version: 1\n")
    (tmp_path / "conf").symlink_to("etc/burnin")
    assert untrusted(tmp_path / "conf" / "inventory.yaml") == ""
    assert untrusted(tmp_path / "conf" / ".." / "etc" / "burnin" / "inventory.yaml") == ""
    assert untrusted(tmp_path / "missing.yaml") == ""  # the reader says what is missing
    os.chown(tmp_path / "etc", 4242, 4242)  # a directory on the way, through the link
    assert untrusted(tmp_path / "conf" / "inventory.yaml").startswith(
        f"{tmp_path / 'etc'} is owned by uid 4242")
    os.chown(tmp_path / "etc", 0, 0)
    (tmp_path / "etc").chmod(0o1777)  # sticky: others cannot rename what is root's
    assert untrusted(tmp_path / "conf" / "inventory.yaml") == ""
    (real / "inventory.yaml").chmod(0o1777)  # but a file others can write, sticky or not
    assert "is writable by group or others (mode 1777)" in untrusted(
        tmp_path / "conf" / "inventory.yaml")
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    assert untrusted(loop).endswith("too many symbolic links")
