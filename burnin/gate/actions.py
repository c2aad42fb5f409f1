"""What quarantine does besides the ledger: drain the node in Slurm, run a command hook.
Every action is an argv list with a timeout; none goes through a shell. An action that
fails is reported and never loses the ledger entry."""

from __future__ import annotations

import re
import subprocess

from burnin.model.drain import NODE_CHECK_PREFIX, REASON_PREFIX
from burnin.model.outcome import ActionResult  # noqa: F401  (callers read it here)
from burnin.transports.slurmctl import SlurmNode, show_nodes

# Slurm keeps longer reasons, but sinfo's columns and people's terminals do not.
REASON_MAX = 200
# Everything but letters, digits, space and . _ : , ; / + - % @ ( ) # =: no quote, $,
# backquote, backslash or ! (trouble inside a shell's quotes), no <, >, &, |, newline or
# control character.
_SLURM_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:,;/+\-%@()#=]")
TIMEOUT_S = 60




def _run(argv: list[str]) -> tuple[bool, str]:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        return False, f"{argv[0]} not found"
    except subprocess.TimeoutExpired:
        return False, f"{argv[0]} did not finish within {TIMEOUT_S} s"
    text = (res.stderr or res.stdout).strip().splitlines()
    return res.returncode == 0, (text[-1] if text else f"exit status {res.returncode}")


def drain_reason(checks: list[str], reasons: list[str]) -> str:
    """The Slurm reason operators read in `sinfo -R`: burnin's prefix and the failed checks
    first, then each check's failure message (the device and the figure against its
    bound): `burnin: failed burn,sdc; burn: cuda:1 (...): 412.3 TFLOPS, below the floor of
    600 TFLOPS; sdc: cuda:3: ...`. One line of at most REASON_MAX characters, the room
    shared fairly between the checks, with nothing scontrol, or a shell where someone
    pastes it quoted, chokes on. `reasons` are "check: message" lines as the ledger has
    them, or free text (a reason given by hand)."""
    head = f"{REASON_PREFIX} failed {','.join(checks)}" if checks else REASON_PREFIX
    details = []
    for reason in reasons:
        check, _, message = reason.partition(": ")
        if check not in checks or len(checks) == 1:
            check, message = "", (message if check in checks else reason)
        details.append(_one_line((f"{check}: " if check else "") + message))
    details = [d for d in details if d]
    # Share the room fairly: messages shorter than their share stay whole, the others are
    # cut to what is left divided among them.
    room, cap = REASON_MAX - len(head) - 2 * len(details), REASON_MAX
    if sum(map(len, details)) > room:
        lengths = sorted(map(len, details))
        for i, length in enumerate(lengths):
            share = room // (len(lengths) - i)
            if length > share:
                cap = share
                break
            room -= length
    details = [d if len(d) <= cap else d[:max(cap - 3, 0)].rstrip() + "..." for d in details]
    text = "; ".join([head, *details]) if checks else " ".join([head, *details])
    if text.startswith(NODE_CHECK_PREFIX):
        # A reason given by hand that begins "node-check:" would read as node-check's own
        # drain, which node-check lifts once its checks pass.
        text = f"{REASON_PREFIX} held:{text[len(REASON_PREFIX):]}"
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3].rstrip() + "..."


def _one_line(text: str) -> str:
    return " ".join(_SLURM_UNSAFE.sub(" ", text).split())


def slurm_drain(node: str, checks: list[str],
                reasons: list[str] | tuple[str, ...] = ()) -> ActionResult:
    """Drain the node with burnin's reason (drain_reason). A drain of burnin's own,
    node-check's included, takes the new reason: node-check lifts only a drain whose
    reason is still its own, and a node in quarantine must stay drained. A drain someone
    else set stays, with their reason, and burnin will never resume it."""
    now = show_nodes([node]).get(node)
    if now is not None and someone_elses(now):
        return ActionResult("slurm", node, True,
                            f"already drained by someone else ({now.reason!r}); left as it is")
    reason = drain_reason(list(checks), list(reasons))
    ok, msg = _run(["scontrol", "update", f"nodename={node}", "state=drain",
                    f"reason={reason}"])
    replaced = f" (in place of {now.reason!r})" if ok and now is not None and now.drained \
        and now.reason and now.reason != reason else ""
    return ActionResult("slurm", node, ok, f"drained: {reason}{replaced}" if ok else msg,
                        drained=ok)


def someone_elses(node: SlurmNode) -> bool:
    """Drained, with a reason that is not burnin's: an administrator's (or Slurm's own)
    drain, which burnin neither rewrites nor lifts."""
    return node.drained and not node.reason.startswith(REASON_PREFIX)


def slurm_reason(node: str) -> str | None:
    """The node's drain reason as Slurm has it, or None when it has none / on error."""
    try:
        res = subprocess.run(["scontrol", "show", "node", node, "--oneliner"],
                             capture_output=True, text=True, timeout=TIMEOUT_S)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    for field in res.stdout.split(" Reason=")[1:2]:
        return field.split(" [")[0].strip()
    return None


def slurm_resume(node: str) -> ActionResult:
    """Resume a node only if burnin drained it: an administrator's drain stays."""
    reason = slurm_reason(node)
    if not reason or not reason.startswith(REASON_PREFIX) \
            or reason.startswith(NODE_CHECK_PREFIX):  # node-check lifts its own
        return ActionResult("slurm", node, True,
                            f"left drained: Slurm reason {reason!r} was not set by this "
                            "burnin run's quarantine")
    ok, msg = _run(["scontrol", "update", f"nodename={node}", "state=resume"])
    return ActionResult("slurm", node, ok, "resumed" if ok else msg)


def command_hook(template: tuple[str, ...], node: str, checks: list[str],
                 reason: str) -> ActionResult:
    """Run the configured argv, placeholders replaced inside each argument: {node},
    {checks} (comma-separated), {reason}. Never a shell."""
    values = {"{node}": node, "{checks}": ",".join(checks), "{reason}": reason}
    argv = []
    for arg in template:
        for key, value in values.items():
            arg = arg.replace(key, value)
        argv.append(arg)
    ok, msg = _run(argv)
    return ActionResult("command", node, ok, "hook ran" if ok else f"hook failed: {msg}")
