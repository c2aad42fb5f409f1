"""The records an inventory turns into: nodes and their settings, every default applied.

Plain frozen dataclasses with no behaviour beyond lookups, so that every other module
(judges, transports, reports) can import them without importing the inventory loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from burnin.model.gpu_reference import GpuModel
from burnin.model.remediation import RemediationSettings
from burnin.model.rolling import RollingSettings
from burnin.model.settings import setting

# The staging directory on a node: under the login user's home, never a shared /tmp
# path that another local user could create first (see transports).
DEFAULT_WORKDIR = "~/.cache/burnin"


@dataclass(frozen=True)
class StorageSettings:
    path: str = setting("str", "/tmp")  # set it to the file system the GPUs read from
    mount: str | None = setting("str", None)  # when set, `path` must be on this mount point


@dataclass(frozen=True)
class Node:
    """One node as the run sees it, every default already applied."""

    name: str
    address: str
    transport: str = "ssh"
    # None means: the interpreter running pytest for `local`, python3 elsewhere.
    python: str | None = None
    workdir: str = DEFAULT_WORKDIR
    gpus: int | None = None  # None: 'auto', whatever the node reports
    gpu_model: str | None = None
    # Devices a CPU-only node (gpus: 0) is tested as, e.g. one per socket: each gets its
    # own worker, figures and all-reduce rank, as each GPU of a GPU node does.
    cpu_devices: int = 1
    # InfiniBand / RoCE HCAs the node must have (fabric check); None: the run's majority.
    hcas: int | None = None
    # The multi-node NVLink domain (an NVL72 rack) the node's GPUs belong to: they must be
    # in its fabric, and agree with its other nodes on cluster and clique
    # (burnin/checks/gpu_fabric.py). None: no domain declared (an NVL4 tray, an HGX node).
    nvlink_domain: str | None = None
    # The node must have an IMEX channel now (the administrator made them for this run).
    imex_channels: bool | None = None
    # Versions the inventory pins (`expect: {driver, vbios, cuda}`), judged by health.
    expect: dict[str, str] = field(default_factory=dict)
    # Each transport's own settings record (`ssh:`, `srun:`), by the transport's name, as
    # its row in burnin/transports' TABLE declares it: node.ssh.port reads it.
    transport_settings: dict[str, Any] = field(default_factory=dict)
    storage: StorageSettings = field(default_factory=StorageSettings)
    labels: dict[str, str] = field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)  # this group's overrides
    # Environment variables its probes set before torch, NCCL or gloo start (`env:`, the
    # node entry's over the defaults', name by name): burnin/model/environment.py.
    env: dict[str, str] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        # Only for names that are no field: a transport's settings (node.ssh), so that
        # this module names no transport and a new one needs no field here.
        settings = self.__dict__.get("transport_settings") or {}
        if name in settings:
            return settings[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


# The inventory labels that name a part of the fleet's topology by default: a component
# that can be one cause of its nodes' failures (a switch, a rack's power). A label
# outside `quarantine.shared_cause.labels` (batch, owner) names no component.
TOPOLOGY_LABELS = ("switch", "leaf", "spine", "rack", "pdu", "chassis", "row")


@dataclass(frozen=True)
class SharedCauseSettings:
    """`quarantine.shared_cause`: when failures of one check are one incident, not N
    faulty nodes (burnin/gate/incidents.py says why these defaults)."""

    fraction: float = setting("fraction", 0.2)  # more than this share of the nodes judged
    min_nodes: int = setting("release_after", 3)  # ... and at least this many
    labels: tuple[str, ...] = setting("str_list", TOPOLOGY_LABELS)  # declared as topology


@dataclass(frozen=True)
class QuarantineSettings:
    ledger: str | None = setting("ledger", None)
    actions: tuple[str, ...] = setting("actions", ())
    release_after: int = setting("release_after", 2)
    command: tuple[str, ...] = setting("str_list", ())
    # A node quarantined repeat_times times within repeat_days is a repeat offender:
    # clean re-validation runs do not release it; a person does.
    repeat_times: int = setting("release_after", 3)
    repeat_days: float = setting("positive", 30.0)
    # Every run's verdict per node is kept this long (burnin history, failures per
    # node-day, the speed trend), then let go.
    keep_runs_days: float = setting("positive", 180.0)
    # A PostgreSQL ledger over TCP without sslmode=verify-full/verify-ca is refused
    # unless this says the operator accepts an unverified connection (burnin/ledger/url.py).
    ledger_insecure: bool = setting("bool", False)
    shared_cause: SharedCauseSettings = setting("mapping", factory=SharedCauseSettings)
    # argv run once per shared-cause incident, to page a person (never per node)
    incident_command: tuple[str, ...] = setting("str_list", ())


@dataclass(frozen=True)
class GoodputSettings:
    """What a node's speed and failures cost a synchronous job (burnin/figures/goodput.py)."""

    job_nodes: int | None = setting("job_nodes", None)  # None: the run's node count
    # a failed job's restart: rescheduling, loading
    restart_minutes: float = setting("nonnegative", 10.0)
    # checkpoint interval: a failure loses half of one
    checkpoint_minutes: float = setting("nonnegative", 60.0)
    speed_drop_per_week: float = setting("fraction", 0.01)  # a steady fall warned of
    min_voters: int = setting("release_after", 5)  # nodes a relative speed needs


@dataclass(frozen=True)
class NodeCheckSettings:
    """`node_check:`: how `burnin node-check` runs on the nodes (docs/operator/node-check.md)."""

    # every check within this; slurmd kills a health check at 60 s
    budget_s: float = setting("budget", 5.0)
    scontrol: str = setting("str", "scontrol")  # a name on PATH (or /usr/bin, /bin) or a path
    # the root and workdir file systems keep this much free
    min_free_gib: float = setting("nonnegative", 1.0)
    # auto: `dcgmi health -c` where dcgmi is installed; off
    dcgm: str = setting("dcgm_mode", "auto")
    # node-check's checks not to run (burnin/model/node_check.py: NODE_CHECKS)
    skip: tuple[str, ...] = setting("node_check_list", ())
    # node-check's cursor, held events and last clean figures: a directory of its own that
    # only its user (root) can write, created 0700 (burnin/nodecheck/state.py).
    state_dir: str = setting("abspath", "/var/lib/burnin/node-check")
    # node_exporter's textfile directory: burnin_node_check_up
    textfile: str | None = setting("abspath", None)


@dataclass(frozen=True)
class Inventory:
    path: str
    cluster: str
    nodes: tuple[Node, ...]
    checks: dict[str, dict[str, Any]]
    quarantine: QuarantineSettings
    gpu_models: dict[str, GpuModel] = field(default_factory=dict)
    require: tuple[str, ...] | None = None  # admission.require; None: every check that applies
    goodput: GoodputSettings = field(default_factory=GoodputSettings)
    node_check: NodeCheckSettings = field(default_factory=NodeCheckSettings)
    remediation: RemediationSettings = field(default_factory=RemediationSettings)
    rolling: RollingSettings = field(default_factory=RollingSettings)
    version: int = 1

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def model(self, node: Node) -> GpuModel | None:
        """The reference figures of the node's gpu_model (built-in or the inventory's)."""
        return self.gpu_models.get(node.gpu_model or "")
