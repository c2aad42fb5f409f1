"""The read loop the local and the SSH transport share (burnin/transports/reading.py),
through each real transport: a command that prints without end is killed at the output
bound, a hung one at its deadline or the moment the run is cancelled, and only the tail
of a flood of stderr is kept. SSH on real test hosts (slow); local in a second."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from burnin.engine.run import PROBES_DIR
from burnin.inventory.schema import load_inventory
from burnin.transports import STDERR_TAIL_BYTES, Transport
from burnin.transports.local import LocalTransport
from burnin.transports.ssh import SshTransport

HANG_S = 600  # what a hung command would sleep; every wait below is far shorter


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.slow)])
def transport(request, tmp_path):
    if request.param == "local":
        node = load_inventory(_inventory(tmp_path)).nodes[0]
        t: Transport = LocalTransport(node, PROBES_DIR, "r1")
    else:
        hosts = request.getfixturevalue("make_hosts")(1)
        node = load_inventory(hosts.write_inventory(tmp_path / "inv.yaml")).nodes[0]
        t = SshTransport(node, PROBES_DIR, "r1")
        t.probe_command("health")  # staged: its commands leave a pidfile to be killed by
    yield t
    t.close()


def _inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text("version: 1\ndefaults: {transport: local, gpus: 0, "
                    f"workdir: {tmp_path / 'work'}}}\nnodes: [{{name: n1}}]\n")
    return path


def sh(line: str) -> list[str]:
    return ["sh", "-c", line]


def test_output_past_its_bound_is_cut_and_the_command_killed(transport):
    # Its deadline is short of forever: without the bound, it would end timed out instead.
    r = transport.run(sh("yes burnin-flood"), b"", 60, max_stdout=100_000)
    assert r.overflow and not r.timed_out and r.exit_code is None
    assert len(r.stdout) == 100_000 and r.stdout.startswith(b"burnin-flood\n")


def test_a_command_within_its_bound_keeps_all_of_it(transport):
    r = transport.run(sh("head -c 99999 /dev/zero"), b"", HANG_S, max_stdout=100_000)
    assert not r.overflow and r.exit_code == 0 and len(r.stdout) == 99_999


def test_a_hung_command_is_killed_at_its_deadline(transport):
    start = time.monotonic()
    r = transport.run(sh(f"echo started; sleep {HANG_S}"), b"", 2, max_stdout=1000)
    assert r.timed_out and r.exit_code is None and r.stdout == b"started\n"
    assert time.monotonic() - start < HANG_S / 2


def test_a_cancelled_run_kills_the_command_within_seconds(transport):
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    start = time.monotonic()
    r = transport.run(sh(f"sleep {HANG_S}"), b"", HANG_S, max_stdout=1000, cancel=cancel)
    assert r.cancelled and not r.timed_out and r.exit_code is None
    assert time.monotonic() - start < HANG_S / 2


def test_only_the_tail_of_a_flood_of_stderr_is_kept_and_every_chunk_is_seen(transport):
    seen = []
    flood = 3 * STDERR_TAIL_BYTES
    r = transport.run(sh(f"head -c {flood} /dev/zero | tr '\\0' x >&2; echo END >&2"), b"",
                      HANG_S, max_stdout=1000, on_stderr=seen.append)
    assert r.exit_code == 0
    assert len(r.stderr_tail) == STDERR_TAIL_BYTES and r.stderr_tail.endswith(b"xxEND\n")
    assert sum(map(len, seen)) == flood + len(b"END\n")
