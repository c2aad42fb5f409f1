"""salloc's holder, by which burnin/transports/slurm.py holds an allocation: a small
command of the controller's own that salloc runs locally, which says the job it holds and
then holds it until its stdin closes, so that a controller that dies, however it dies,
also releases the allocation; and the release, waited for until Slurm has the job's nodes
back."""

from __future__ import annotations

import getpass
import json
import os
import selectors
import signal
import subprocess
import threading
import time

from burnin.transports.reading import LINE_MAX, capped
from burnin.transports.slurmctl import TIMEOUT_S, slurm_env

RELEASE_WAIT_S = 60.0  # a released job's nodes leave COMPLETING within this (epilogs)
# Runs on the controller as salloc's command: says which job it holds, then holds it
# until its stdin closes (the controller released it, or died).
HOLDER = ("import json, os, sys; print(json.dumps({k: os.environ.get(k, '') for k in "
          "('SLURM_JOB_ID', 'SLURM_JOB_NODELIST')}), flush=True); sys.stdin.buffer.read()")


def salloc_holder(argv: list[str], job_name: str, wait_s: float,
                  cancel: threading.Event | None = None):
    """salloc started with `argv` (its command the HOLDER), waited for at most `wait_s`
    or until `cancel`: (the holder's job facts, or None; salloc's last words; the holder
    process). No job of `job_name` outlives a refusal, nor a Ctrl-C meanwhile."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True,
                                env=slurm_env())
    except OSError as e:
        return None, f"cannot start salloc: {e}", None
    line, err = b"", bytearray()
    try:
        deadline = time.monotonic() + wait_s
        with selectors.DefaultSelector() as sel:
            assert proc.stdout is not None and proc.stderr is not None  # PIPE, both
            sel.register(proc.stdout, selectors.EVENT_READ)
            sel.register(proc.stderr, selectors.EVENT_READ)
            while not line.endswith(b"\n") and len(line) <= LINE_MAX \
                    and time.monotonic() < deadline:
                if cancel is not None and cancel.is_set():
                    break
                events = sel.select(timeout=0.5)
                if not events and proc.poll() is not None:
                    break
                for key, _ in events:
                    chunk = os.read(key.fd, 4096)
                    if not chunk:
                        sel.unregister(key.fileobj)
                    elif key.fileobj is proc.stdout:
                        line += chunk
                    else:
                        err += chunk
                        del err[:-LINE_MAX]  # salloc's last words are what it says
        facts = _facts(line)
    except BaseException:  # Ctrl-C while waiting: no allocation may outlive the run
        release_holder(proc, "", job_name)
        raise
    said = "; ".join(ln.strip() for ln in err.decode(errors="replace").splitlines()
                     if "error" in ln or "Required" in ln)
    if facts is None and len(line) > LINE_MAX:
        said = capped(f"the job's first line on its node passed {LINE_MAX} bytes without "
                      f"an end; {said}")
    if not facts or not facts.get("SLURM_JOB_ID"):
        release_holder(proc, "", job_name)
        return None, said, None
    # salloc keeps writing to stderr (its release messages): never let that pipe fill.
    threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
    return facts, said, proc


def _facts(line: bytes) -> dict | None:
    """The holder's job facts from its first line; None for a line cut at LINE_MAX, or one
    that is no JSON object (a node's shell that printed first)."""
    if not line.endswith(b"\n") or len(line) > LINE_MAX:
        return None
    try:
        facts = json.loads(line)
    except ValueError:
        return None
    return facts if isinstance(facts, dict) else None


def _drain(pipe) -> None:
    try:
        while pipe.read(4096):
            pass
    except (OSError, ValueError):
        pass


def release_holder(proc: subprocess.Popen | None, job_id: str, job_name: str) -> None:
    """End salloc's holder (salloc then releases the job), make sure Slurm has the job
    gone (scancel), and wait until its nodes have left COMPLETING."""
    if proc is not None:
        try:
            proc.stdin.close()  # type: ignore[union-attr]  # Popen(stdin=PIPE); None: raises, caught
        except (OSError, ValueError):
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait(timeout=10)
    cancel = ["scancel", job_id] if job_id else \
        ["scancel", f"--name={job_name}", f"--user={getpass.getuser()}"]
    try:
        subprocess.run(cancel, capture_output=True, timeout=TIMEOUT_S, env=slurm_env())
    except (OSError, subprocess.TimeoutExpired):
        return
    if not job_id:
        return
    released(job_id)


def released(job_id: str) -> bool:
    """Wait until Slurm says job `job_id` is gone (no longer pending, running or completing:
    its nodes are free for the next job); False if it did not say so in RELEASE_WAIT_S. A
    squeue that fails (slurmctld slow to answer) is asked again, never taken for 'gone'."""
    deadline = time.monotonic() + RELEASE_WAIT_S
    while time.monotonic() < deadline:
        try:
            res = subprocess.run(["squeue", "-h", f"--jobs={job_id}", "-o", "%T"],
                                 capture_output=True, text=True, timeout=TIMEOUT_S,
                                 env=slurm_env())
        except OSError:
            return False
        except subprocess.TimeoutExpired:
            continue
        if res.returncode == 0 and not res.stdout.strip():
            return True
        if res.returncode != 0 and "Invalid job id" in res.stderr:
            return True  # already purged (MinJobAge)
        time.sleep(0.3)
    return False
