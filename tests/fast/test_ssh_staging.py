"""What the SSH transport reads once per run and what its holder writes on the node: the
known_hosts index answers as paramiko's own HostKeys does, and the holder stages the
probes archive into its private directory under plain names only."""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path

import paramiko

from burnin.engine.run import PROBES_DIR
from burnin.transports.nodeside import HOLDER
from burnin.transports.ssh import probes_archive
from burnin.transports.sshconnect import KnownHosts


def test_the_known_hosts_index_answers_as_paramiko_does(tmp_path):
    keys = [paramiko.ECDSAKey.generate() for _ in range(4)]

    def line(names: str, key) -> str:
        return f"{names} {key.get_name()} {key.get_base64()}\n"
    hashed = paramiko.HostKeys.hash_host("10.0.0.3")
    path = tmp_path / "known_hosts"
    path.write_text("# a comment\n\n" + line("10.0.0.1,gpu001", keys[0])
                    + line("[10.0.0.2]:2222", keys[1]) + line(hashed, keys[2])
                    + "too-few-fields\n" + line("10.0.0.1", keys[3]))
    ours, theirs = KnownHosts(str(path)), paramiko.HostKeys(str(path))
    for name in ("10.0.0.1", "gpu001", "[10.0.0.2]:2222", "10.0.0.2", "10.0.0.3", "10.0.0.4"):
        expected = theirs.lookup(name)
        got = ours.lookup(name)
        assert [k.get_base64() for k in got] == (
            [expected[t].get_base64() for t in dict.fromkeys(expected.keys())]
            if expected else []), name
    assert ours.lookup("10.0.0.3")[0] == keys[2]  # a hashed entry is found
    assert ours.lookup("10.0.0.1") == [keys[0]]  # the first key of a type wins


def hold(tmp_path: Path, archive: bytes) -> tuple[str, str, Path]:
    """Run the holder on this machine, send it `archive`: (its first answer, its second,
    the directory it made)."""
    done = subprocess.run([sys.executable, "-c", HOLDER, str(tmp_path / "w"), "n1", "r1"],
                          input=b"probes %d\n" % len(archive) + archive,
                          capture_output=True, timeout=60)
    first, second = (done.stdout.decode().splitlines() + ["", ""])[:2]
    return first, second, Path(first.removeprefix("ready "))


def test_the_holder_stages_the_probes_archive(tmp_path):
    first, second, where = hold(tmp_path, probes_archive(PROBES_DIR))
    assert first.startswith("ready ") and second == f"staged {len(list(PROBES_DIR.glob('*.py')))}"
    assert not where.exists(), "the holder removes its directory when its stdin closes"


def test_the_holder_refuses_a_name_that_is_not_a_plain_file_name(tmp_path):
    for name in ("../outside.py", "/tmp/abs.py", ".hidden", "a/b.py"):
        body = b"print('x')\n"
        archive = zlib.compress(f'[["{name}", {len(body)}]]'.encode() + b"\n" + body)
        first, second, _ = hold(tmp_path, archive)
        assert first.startswith("ready "), first
        assert second.startswith("unstaged ValueError: not a plain file name"), (name, second)
    assert not (tmp_path / "outside.py").exists()
    assert not (tmp_path / "w" / "outside.py").exists()
