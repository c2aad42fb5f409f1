"""The health check's rule for a GPU's NVLink fabric (GB200/GB300 NVL trays, HGX systems
with NVSwitch) and the IMEX channels multi-node NVLink needs, over what the node's
probes/gpufabric.py read from NVML. Imports nothing of burnin: a fast tier (burnin
node-check) may use it as it is.

NVML's words (nvml.h, NVML 13.0): the fabric registration state is NOT_SUPPORTED,
NOT_STARTED, IN_PROGRESS or COMPLETED, and its status "must be checked only if state
returns complete"; the health mask says whether bandwidth is degraded, a route is
unhealthy, a route or access-timeout recovery is in progress, and whether the
configuration is incorrect (no partition, insufficient NVLinks, ...); v3's summary is
HEALTHY, UNHEALTHY or LIMITED_CAPACITY.

A GPU whose fabric NVML reports (any state but not_supported) passes only COMPLETED with
status 0 and no health field against it. Whether a node's GPUs must be in a fabric is the
node's, not its model's: one GB200 model covers NVL72 trays (a multi-node NVLink domain)
and NVL4 trays (none). A node that declares `nvlink_domain:` in the inventory fails where
NVML reports no fabric; its GPUs, and the nodes of one declared domain, must agree on the
cluster uuid and clique id (the odd one out fails: one rack, one fabric manager, one
partition). IMEX channels are created by the administrator (NVreg_CreateImexChannel0=1,
or per ComputeDomain under Kubernetes) and do not survive a reboot (NVIDIA's IMEX guide):
an idle node may have none, so they fail only where the inventory says `imex_channels:
true`, and a declared domain without one warns. A model flag (gpu_models'
nvlink_fabric, imex_channels, which a site may set for its own model) still requires them.
"""

from __future__ import annotations

# Health fields whose value fails the GPU, and how the failure reads.
BAD_HEALTH = {
    "degraded_bandwidth": ({"true"}, "NVLink bandwidth is degraded"),
    "route_unhealthy": ({"true"}, "an NVLink route is unhealthy"),
    "route_recovery": ({"true"}, "an NVLink route recovery is in progress"),
    "access_timeout_recovery": ({"true"}, "an access-timeout recovery is in progress"),
    "gfm_state": ({"disconnected"}, "the global fabric manager is disconnected"),
}
GOOD_CONFIGURATION = ("none", "not_supported")
BAD_SUMMARY = ("unhealthy", "limited_capacity")


def fabric_faults(gpu: str, fabric: dict | None, required: bool) -> list[str]:
    """Why one GPU's fabric registration keeps the node out, or nothing. `required`: the
    GPU must be in an NVLink fabric (a missing or unsupported reading fails)."""
    if fabric is None or fabric.get("state") == "not_supported":
        if required:
            return [f"{gpu}: NVML reports no NVLink fabric state (the node's NVLink domain "
                    "needs one: is the fabric manager running, NVLink supported here?)"]
        return []
    state = fabric.get("state")
    if state != "completed":
        return [f"{gpu}: NVLink fabric registration is {str(state).replace('_', ' ')}, "
                "expected completed (clique "
                f"{fabric.get('clique_id')}, cluster {fabric.get('cluster_uuid')})"]
    out = []
    if fabric.get("status"):
        out.append(f"{gpu}: NVLink fabric registration completed with NVML status "
                   f"{fabric['status']}, expected 0 (success)")
    health = fabric.get("health") or {}
    for field, (bad, says) in BAD_HEALTH.items():
        if health.get(field) in bad:
            out.append(f"{gpu}: {says} (fabric health mask {fabric.get('health_mask')})")
    config = health.get("incorrect_configuration")
    if config is not None and config not in GOOD_CONFIGURATION:
        out.append(f"{gpu}: NVLink fabric configuration is incorrect: "
                   f"{config.replace('_', ' ')}")
    if fabric.get("summary") in BAD_SUMMARY:
        out.append(f"{gpu}: NVLink fabric health summary is "
                   f"{fabric['summary'].replace('_', ' ')}")
    return out


def imex_faults(imex: dict | None, required: bool) -> list[str]:
    """The node's IMEX channel devices, where the inventory (or the model) needs them."""
    if not required:
        return []
    if not imex:
        return ["IMEX channels were not looked for (imex_channels: true needs them)"]
    if imex.get("error"):
        return [f"IMEX channels unreadable: {imex['error']}"]
    if not imex.get("count"):
        return [f"no IMEX channel in {imex.get('path')} (imex_channels: true: the "
                "driver's NVreg_CreateImexChannel0=1, or the channel made by hand; they do "
                "not survive a reboot)"]
    return []


def fabric_required(node, model) -> bool:
    """Must the node's GPUs be in an NVLink fabric: it declares an NVLink domain (or its
    model, as a site defined it, says so)."""
    return bool(getattr(node, "nvlink_domain", None) or (model and model.nvlink_fabric))


def imex_required(node, model) -> bool:
    """Must the node have an IMEX channel now: the inventory says so (or the model)."""
    return bool(getattr(node, "imex_channels", None) or (model and model.imex_channels))


def imex_warnings(imex: dict | None, node, required: bool) -> list[str]:
    """A node of a declared NVLink domain with no IMEX channel, where none is required."""
    domain = getattr(node, "nvlink_domain", None)
    if required or not domain or not imex or imex.get("error") or imex.get("count"):
        return []
    return [f"no IMEX channel in {imex.get('path')}: multi-node NVLink memory sharing in "
            f"nvlink_domain {domain} needs one (the administrator creates them, or a "
            "ComputeDomain; they do not survive a reboot: imex_channels: true requires one)"]


def place(fabric: dict | None) -> tuple[str, int] | None:
    """(cluster uuid, clique id) of a GPU whose fabric registration completed."""
    if not isinstance(fabric, dict) or fabric.get("state") != "completed":
        return None
    cluster, clique = fabric.get("cluster_uuid"), fabric.get("clique_id")
    if not isinstance(cluster, str) or not isinstance(clique, int):
        return None
    return cluster, clique


def _words(p: tuple[str, int]) -> str:
    return f"cluster {p[0]}, clique {p[1]}"


def _leader(votes: dict) -> tuple[str, int] | None:
    """The value most votes hold outright; None for a tie (or no vote)."""
    counts: dict = {}
    for v in votes.values():
        counts[v] = counts.get(v, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def node_place(devices: list[dict]) -> tuple[str, int] | None:
    """The place all of a node's completed GPUs agree on; None where they do not (or
    where none completed)."""
    places = {p for p in (place(d.get("fabric")) for d in devices) if p is not None}
    return places.pop() if len(places) == 1 else None


def agreement_faults(devices: list[dict], name) -> list[str]:
    """GPUs of one node in one fabric: a GPU whose cluster uuid or clique id differs
    from the node's other GPUs fails (`name(dev)` names it); with no majority, each."""
    votes = {i: p for i, d in enumerate(devices)
             if (p := place(d.get("fabric"))) is not None}
    if len(set(votes.values())) < 2:
        return []
    lead = _leader(votes)
    out = []
    for i, p in votes.items():
        if p == lead:
            continue
        others = f"{sum(v == lead for v in votes.values())} of the node's GPUs: " \
                 f"{_words(lead)}" if lead else "the node's GPUs disagree, none leads"
        out.append(f"{name(devices[i])}: NVLink fabric {_words(p)}; {others}")
    return out


def domain_summary(outcomes: dict, nodes: dict) -> dict[str, tuple]:
    """Per declared NVLink domain: (the place most of its nodes agree on, or None, the
    nodes that voted), each node one vote (its GPUs' common place)."""
    votes: dict[str, dict] = {}
    for name, o in outcomes.items():
        domain = getattr(nodes.get(name), "nvlink_domain", None)
        p = node_place(o.data["devices"]) if domain and o.ok else None
        if domain and p is not None:
            votes.setdefault(str(domain), {})[name] = p
    return {d: (_leader(v), len(v)) for d, v in votes.items()}


def domain_faults(node, devices: list[dict], summary: dict | None) -> list[str]:
    """A node of a declared domain whose GPUs' place is not its domain's."""
    domain = getattr(node, "nvlink_domain", None)
    mine = node_place(devices)
    if not domain or mine is None or not summary or domain not in summary:
        return []
    lead, voters = summary[domain]
    if voters < 2 or mine == lead:
        return []
    if lead is None:
        return [f"NVLink fabric {_words(mine)}: the {voters} nodes of nvlink_domain "
                f"{domain} disagree, none leads"]
    return [f"NVLink fabric {_words(mine)}; most of nvlink_domain {domain}'s {voters} "
            f"nodes: {_words(lead)}"]
