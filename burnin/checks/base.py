"""What a check is: one object holding everything the rest of burnin needs to know about
it. The run executes it, the suites judge with it, reports and metrics draw its figures,
admission asks whether it applies to a node; nobody else branches on a check's name.

A new check is one probe (probes/<name>.py), one module here defining `CHECK`, one suite
file (suites/test_<name>.py) and one row in burnin/checks/__init__.py; plus, if it wants
one, its part of a node's section on summary.html (Check.page, a function in
burnin/report/summary/checks.py or anywhere else, named by reference so that nothing here
imports the page). tests/test_new_check.py counts these places. A check from outside the
repository is an installed distribution's entry point instead, its probe named by
Check.probe_path (burnin/extensions.py; docs/developer/plugins.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from burnin.model.gpu_reference import GpuModel
from burnin.model.nodes import Node
from burnin.model.verdict import FailureKind, Verdict
from burnin.probe.protocol import DEFAULT_MAX_OUTPUT, ProbeOutcome
from burnin.probe.shapes import Obj

PROFILES = ("quick", "standard", "extended")
DEFAULT_PROFILE = "standard"
# The fewest nodes a rule comparing a node with its peers (a median, a majority) needs:
# of two that disagree, neither is the odd one out (one liar and one honest node cannot
# outvote each other), so a pair is judged by the model's floors alone.
PEERS = 3


# How many robust spreads below its peers' median a figure may fall before it fails
# (burn, pcie, allreduce): measured noise a whole healthy fleet shows fails none of it.
# Set by benchmarks/verdict_calibration.py (RESULTS.md, "Verdict calibration"): the
# fewest spreads at which healthy node-runs failed at most 1 in 1,000 at every fleet
# size from 3 to 1,000.
PEER_SPREADS = 6.0
# However noisy the run, a figure at half its peers' median is no noise: the spread
# widens the margin below the median up to this share and no further.
MAX_MARGIN = 0.5


def robust_spread(deviations: list[float]) -> float | None:
    """A spread from relative deviations (|figure / median - 1|, one per voter): 1.4826 x
    their median, a normal noise's standard deviation, which a few outliers (the slow
    devices a rule is there to catch) do not widen. None for no voter."""
    return 1.4826 * median(deviations) if deviations else None


def peer_medians(votes: dict) -> dict:
    """{key: {median, nodes, spread}} of each key's votes (one figure per node): the peers a
    peer rule compares a node with; no spread where the median is 0."""
    out = {}
    for key, v in votes.items():
        center = median(v)
        out[key] = {"median": center, "nodes": len(v),
                    "spread": robust_spread([abs(r / center - 1) for r in v]) if center > 0
                    else None}
    return out


def node_spread(nodes: list[list[float]], center: float | None = None) -> float | None:
    """The robust spread of devices about `center` (None: their own node's median), each
    node one vote (its devices' median deviation): a node claiming many devices cannot
    widen it."""
    votes = [median(abs(t / c - 1) for t in d) for d in nodes
             if (c := center or median(d)) > 0]
    return robust_spread(votes)


def peer_bound(center: float, spread: float | None, fraction: float, spreads: float,
               unit: str) -> tuple[float, str]:
    """The lowest a figure may be against its peers' median `center`: fraction x center,
    or lower where the run's own figures spread wider than that (spreads x their robust
    spread below the median, up to MAX_MARGIN); fraction 0 turns the rule off. With the
    words that say which, to follow "below "."""
    margin = min(MAX_MARGIN, (spreads or 0) * (spread or 0))
    if fraction and margin > 1 - fraction:
        share = 1 - margin
        return (share * center, f"{share:.3g} x {center:.3f} {unit} ({spreads:g} x the "
                f"robust spread of {spread:.1%} below it)")
    return fraction * center, f"{fraction:g} x {center:.3f} {unit}"


# Kinds of failure whose evidence is the node's own (FailureKind): they quarantine their
# node however many nodes show them, and are never part of a shared-cause incident. A
# check lists the ones its judge reports in Check.failure_kinds; a failure of no
# declared own kind (a floor, throughput, reachability, storage, a link) is one whose
# cause may lie outside the node.
WRONG_RESULT = FailureKind("wrong result", True, "an element, checksum or bitwise repeat "
                           "of a known computation wrong on the node's devices")
DIGEST = FailureKind("digest", True, "a result digest that differs from the one most of "
                     "the run's nodes produced from the same inputs")
XID = FailureKind("xid", True, "an XID or NVSwitch SXid the node's driver logged")
ECC = FailureKind("ecc", True, "uncorrectable ECC or memory errors, a row remap pending or "
                  "failed, pages retired or pending retirement")
DEVICE_COUNT = FailureKind("device count", True, "a GPU missing, lost or unseen, or more "
                           "devices reported than the node has")
DIVERGED = FailureKind("diverged", True, "a data-parallel replica that differs from the "
                       "others, or a train digest that differs")
MEMORY_PATTERN = FailureKind("memory pattern", True, "a word of device memory read back "
                             "other than written")


@dataclass(frozen=True)
class Kind:
    """A value kind of a check's own (compute_mode, dcgm's level): the test a value must
    pass in an inventory, and what the error message says was expected."""

    test: Callable[[object], bool]
    expected: str


@dataclass(frozen=True)
class Setting:
    """One setting: its kind (a general inventory kind by name, burnin/inventory/schema.py's
    KINDS, or a check's own Kind) and default per profile."""

    kind: str | Kind
    default: dict[str, object] | object = None
    doc: str = ""

    def value_for(self, profile: str) -> object:
        if isinstance(self.default, dict):
            return self.default[profile]
        return self.default


# A GEMM's settings (sdc, burn): its element type and how often it verifies.
DTYPE = Kind(lambda v: v in ("bf16", "fp16", "fp32"), "one of: bf16, fp16, fp32")
VERIFY_EVERY = Kind(lambda v: v == "auto" or (isinstance(v, int) and not isinstance(v, bool)
                                             and v >= 1), "an integer >= 1, or auto")


def timeout(quick: float, standard: float, extended: float) -> Setting:
    return Setting("positive", {"quick": quick, "standard": standard, "extended": extended},
                   "seconds before the probe's process group is killed")


@dataclass(frozen=True)
class Figure:
    """A key figure of a probe record, for metrics.prom, summary.html and burnin compare."""

    metric: str            # its name, without the burnin_ prefix, in the check's unit
    labels: tuple          # ((name, value), ...) besides cluster and node
    value: float           # in the unit the check reports (metrics.py converts to base units)
    help: str
    better: str = "higher"  # or "lower": which way is good, for `burnin compare`

    def __post_init__(self):
        if self.better not in ("higher", "lower"):
            raise ValueError(f"Figure {self.metric}: better must be 'higher' or 'lower'")


class _Labels(dict):
    def __missing__(self, key: str) -> str:  # a label the figure lacks reads as nothing
        return ""


@dataclass(frozen=True)
class Measure:
    """What a kind of Figure (one metric name) is, as data: the unit people read it in,
    the family a node's trend folds it into, its name in the "moved" table, which end of
    a family is its worst device, and its fleet chart on summary.html (devices ranked
    worst first). `family`, `label`, `chart` and `key` are format strings over the
    figure's labels ("{check} TFLOPS {device}")."""

    metric: str
    unit: str                       # as printed: "TFLOPS", "GB/s", "°C"
    family: str
    label: str
    worst: str = "low"              # "low": the slowest device; "high": the hottest
    chart: str = ""                 # the fleet chart's title; '' = no fleet chart
    # The fleet chart's key: its figures' medians on the page, and the floors it draws
    # (Verdict.floors of the same name).
    key: str = ""
    per_model: bool = False         # one fleet chart per device model
    zero: bool = True               # the chart's axis includes 0 (off for temperatures)
    span: float = 0.0               # the least range the chart's axis shows
    # A speed a synchronous job runs at (TFLOPS, GB/s): the node's relative speed, and
    # its goodput price, is its slowest such figure against the fleet (burnin/figures/goodput.py).
    speed: bool = False

    def __post_init__(self):
        if self.worst not in ("low", "high"):
            raise ValueError(f"Measure {self.metric}: worst must be 'low' or 'high'")

    def family_of(self, labels: tuple) -> str:
        return self.family.format_map(_Labels(labels))

    def label_of(self, labels: tuple) -> str:
        return self.label.format_map(_Labels(labels))

    def key_of(self, labels: tuple) -> str:
        return self.key.format_map(_Labels(labels))

    def chart_of(self, labels: tuple) -> str:
        return self.chart.format_map(_Labels(labels))


def device_tflops(chart: str, speed: bool = False) -> Measure:
    """A GEMM's speed per device (sdc, burn: the `check` label tells them apart)."""
    return Measure("device_tflops", "TFLOPS", "{check} TFLOPS, slowest device",
                   "{check} TFLOPS {device}", chart=chart, key="{check}", per_model=True,
                   speed=speed)


@dataclass(frozen=True)
class Fleet:
    """A check's outcomes on every node of the run, with what the controller knows of each
    node: its device count and model. Fleet figures count each node once (a node cannot
    outvote its peers by claiming more devices) and only nodes whose report is credible."""

    outcomes: dict[str, ProbeOutcome]
    devices: dict[str, int | None] = field(default_factory=dict)  # what each must report
    models: dict[str, GpuModel | None] = field(default_factory=dict)
    # Each node as the inventory gives it (its declared NVLink domain, say).
    nodes: dict[str, Node] = field(default_factory=dict)
    # Each node's settings for the check: what its probe was sent (train: the job).
    settings: dict[str, dict] = field(default_factory=dict)

    def voters(self):
        """(node, outcome) of every node that ran and reported the devices it must have."""
        for name, o in self.outcomes.items():
            want = self.devices.get(name)
            if o.ok and (want is None or len(o.data["devices"]) == want):
                yield name, o


def count_problem(devices: list, j: Judging) -> list[str]:
    """A node must report exactly the devices it has: the inventory's, or what its health
    facts showed. More is a node claiming weight it does not have; fewer hides a device."""
    if j.devices is None or len(devices) == j.devices:
        return []
    return [DEVICE_COUNT(f"the probe reported {len(devices)} device(s), expected {j.devices} "
                         "(the inventory's count, or what the node's health facts showed)")]


def device_name(dev: dict) -> str:
    """How a failure message names a device: its index, with its model and UUID."""
    about = ", ".join(str(x) for x in (dev.get("name"), dev.get("uuid")) if x)
    return f"{dev.get('device')} ({about})" if about else str(dev.get("device"))


def implausible(tflops, model: GpuModel | None) -> str:
    """Why a TFLOPS figure cannot be real (beyond the model's datasheet peak), or ''."""
    if model is None or model.peak_tflops is None or not isinstance(tflops, (int, float)):
        return ""
    if tflops > 1.05 * model.peak_tflops:
        return (f"implausible: {tflops:.1f} TFLOPS is beyond the {model.key}'s peak of "
                f"{model.peak_tflops:g} TFLOPS")
    return ""


@dataclass(frozen=True)
class Judging:
    """What a judge needs beyond the node and its outcome."""

    settings: dict                  # this node's settings for the check
    # The check's fleet summary, computed once per run: of the shape its own summarize
    # returns and its own judge reads (Any: each check's is its own).
    fleet: Any = None
    model: GpuModel | None = None   # reference figures of the node's gpu_model
    devices: int | None = None      # devices the node must report (inventory or health)
    gpus: int | None = None         # of which GPUs: 0 on a CPU-only node; None: unknown


@dataclass(frozen=True)
class Check:
    name: str
    doc: str                        # what it proves, one line
    judge: Callable[[Node, ProbeOutcome, Judging], Verdict]
    schema: Obj                     # the probe document's declared shape
    settings: dict[str, Setting] = field(default_factory=dict)
    probe: str = ""                 # probes/<probe>.py; '' = the check's name
    # The probe's file, for a check an installed distribution brings (its own file, run
    # beside probes/probelib.py as <probe_name>.py); '' = probes/<probe_name>.py.
    probe_path: str = ""
    summarize: Callable[[Fleet], object] | None = None
    figures: Callable[[dict], list[Figure]] | None = None
    # Extra files for a failed node's evidence folder: {file name: JSON-able content}.
    evidence: Callable[[dict], dict[str, object]] | None = None
    gpu_only: bool = False          # does not apply to a CPU-only node
    # The check whose probe reports the node's facts (health): a `gpus: auto` node's
    # device count is learned from it before any other check runs on the node.
    facts: bool = False
    # A group check runs over every node that passed the single-node checks, after them,
    # and applies only where a node has peers (the inter-node all-reduce).
    execute: Callable[[Any], dict[str, ProbeOutcome]] | None = None
    # The command a check needs on the node (dcgm: dcgmi), from the node's settings for the
    # check: the facts check looks for it, and where it is missing the check does not apply.
    tool: Callable[[dict], str] | None = None
    # Bytes of JSON the probe may print (burnin/probe/protocol.py): what its honest document can
    # reach. output_bound(settings, devices), when given, derives it from the node's
    # settings and device count (None: unknown) instead: burn's telemetry grows with both.
    max_output: int = DEFAULT_MAX_OUTPUT
    output_bound: Callable[[dict, int | None], int] | None = None
    # The document's shape on a node with these settings and devices, when it depends on
    # them (burn: no series longer than the samples a probe can take before its kill):
    # a document within its byte bound is then also no longer than an honest one.
    schema_bound: Callable[[dict, int | None], Obj] | None = None
    # What the facts probe (health, the run's first) reads before the load for this check,
    # from the check's settings: its snapshot comes back to this check's probe as
    # `baseline`, so that it judges growth over the run (fabric: error counters).
    baseline: Callable[[dict], dict] | None = None
    # Its part of a node's section on summary.html: "module:function", imported when the
    # page is drawn (summary code sits above the checks; the checks never import it).
    # '' = the generic part: its devices' figures in a table.
    page: str = ""
    # Its fleet-wide part, computed once a page ("module:function" of the Report, giving a
    # summary.fleet.FleetPart): data its node parts share, lines on rank charts, charts.
    fleet_page: str = ""
    # Where its part stands in a node's section and in the grid's stripes (lower first);
    # checks of equal order by name.
    page_order: int = 1000
    # What each metric name its `figures` return is: unit, trend family, label.
    measures: tuple[Measure, ...] = ()
    # The kinds of failure its judge tags (FailureKind; the own ones above): each says
    # whether its evidence is the node's own. A failure of an own kind quarantines its
    # node whatever the count (burnin/gate/incidents.py leaves it out of every incident).
    failure_kinds: tuple[FailureKind, ...] = ()

    @property
    def probe_name(self) -> str:
        return self.probe or self.name

    def output_limit(self, settings: dict, devices: int | None) -> int:
        """The bytes this check's probe may print on a node with these settings."""
        if self.output_bound is not None:
            return self.output_bound(settings, devices)
        return self.max_output

    def schema_for(self, settings: dict, devices: int | None) -> Obj:
        """The document shape this check's probe must print on such a node."""
        if self.schema_bound is not None:
            return self.schema_bound(settings, devices)
        return self.schema

    @property
    def group(self) -> bool:
        return self.execute is not None

    def applies(self, gpus: int | None, nodes: int,
                equipped: frozenset[str] | None = None) -> bool:
        """Whether the check applies to a node with `gpus` GPUs (None: unknown, which
        counts as GPUs: fail closed) in a run of `nodes` nodes, whose facts found the tools
        of the checks named in `equipped` (None: unknown, which counts as found)."""
        if self.group and nodes < 2:
            return False
        if self.tool is not None and equipped is not None and self.name not in equipped:
            return False
        return not (self.gpu_only and gpus == 0)

    def resolve(self, profile: str, *overrides: dict) -> dict:
        """The settings the check runs with: profile defaults, then each override."""
        values: dict[str, Any] = {key: s.value_for(profile)
                                  for key, s in self.settings.items()}
        for o in overrides:
            values.update(o or {})
        if values.get("timeout_s") is None:
            values["timeout_s"] = 2 * values.get("duration_s", 0) + 300
        return values
