"""Type stubs of paramwin._core, the C++ extension (python/src). Use the paramwin package:
its classes wrap these. tests/python/test_stubs.py checks that every name of the extension
is declared here."""

from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

version: str
mpi_vendor: str
mpi_version: Union[Tuple[int, int, int], str]

Number = Union[int, float]
Hyper = Dict[str, Number]
# (name, address, dtype, shape[, device]): device True for CUDA memory given in place to a
# device window (paramwin::device_memory), False or left out for host memory.
Descriptor = Union[Tuple[Optional[str], int, str, Tuple[int, ...]],
                   Tuple[Optional[str], int, str, Tuple[int, ...], bool]]

def option_keys() -> List[Tuple[str, str, str, str]]:
    """The C++ option key table: (key, aliases, value, doc) per key."""
def hook_names() -> List[str]:
    """The callables an agent takes."""
def enum_tables() -> Dict[str, List[str]]:
    """The library's enumerations: name -> value names in order."""
def parse_enum(enumeration: str, text: str) -> str:
    """The canonical name of ``text`` (a name or an alias) in an enumeration of enum_tables(),
    parsed by the library (InvalidArgument listing the valid spellings)."""
def check_agent_options(config: Mapping[str, str], population: int) -> None:
    """Parses and validates agent options (raises InvalidArgument)."""
def cuda_devices() -> Tuple[int, str]:
    """(count, why): the CUDA devices the library sees, CUDA's reason when there are none."""
def agree(comm: Any, local_error: str) -> str:
    """Collective: '' when local_error is '' on every rank; else this rank's error or
    'paramwin: rank N failed: ...' (the library's agreement)."""
def device_obstacle(tensors: Sequence[Tuple[str, bool, int, str]]) -> Tuple[str, int, bool]:
    """(why, device, any_cuda) for tensors [(name, is_cuda, device index, device text)]:
    paramwin::device_obstacle ('' when they can live in a device window)."""
def choose_device_window(comm: Any, required: bool, never: bool,
                         obstacle: Callable[[], Tuple[str, int, bool]], prefix: str,
                         required_by: str) -> Tuple[bool, int]:
    """(device, cuda_device): paramwin::choose_device_window, collective over comm unless
    never (and not required)."""

class LayerSpec:
    """One named layer."""
    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def count(self) -> int: ...
    @property
    def dtype(self) -> str: ...

class Layout:
    """Ordered named layers with a fingerprint."""
    def __init__(self) -> None: ...
    def add(self, name: str, shape: Union[int, Tuple[int, ...]] = ..., dtype: str = ...) -> "Layout": ...
    def add_hyperparameter(self, name: str, type: str = ...) -> "Layout": ...
    @property
    def hyperparameters(self) -> Dict[str, str]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: Union[int, str]) -> LayerSpec: ...
    def __iter__(self) -> Iterator[LayerSpec]: ...
    def __contains__(self, name: str) -> bool: ...
    def index_of(self, name: str) -> int: ...
    @property
    def names(self) -> List[str]: ...
    @property
    def total_elements(self) -> int: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def fingerprint(self) -> int: ...
    def serialize(self) -> str: ...
    @staticmethod
    def deserialize(text: str) -> "Layout": ...
    @staticmethod
    def first_difference(a: "Layout", b: "Layout") -> str: ...

class PublishResult:
    """What a publish did."""
    published: bool
    version: int
    seconds: float
    def __bool__(self) -> bool: ...

class DonorRead:
    """What a pull read from one donor."""
    rank: int
    version: int
    stamp: int
    transport: str
    bytes: int
    attempts: int
    pinned: bool
    skipped: bool
    weight: float
    metric: float
    hyper: Hyper

class PullResult:
    """What a pull did."""
    donors: List[DonorRead]
    bytes: int
    seconds: float

class AgentStatus:
    """The fields an agent sets about itself."""
    iteration: int
    age: int
    metric: float
    generation: int
    state: str

class RosterEntry:
    """One agent's roster as read at one instant."""
    rank: int
    version: int
    fingerprint: int
    status_updates: int
    publish_time: float
    answered: bool
    suspect: bool
    suspect_reason: str
    heartbeat: int
    pid: int
    incarnation: int
    hyper: Hyper
    iteration: int
    age: int
    metric: float
    generation: int
    previous: Optional[Tuple[int, float]]
    state: str

class PhaseSeconds:
    """Seconds spent in each phase of one step."""
    decide: float
    pull: float
    mix: float
    publish: float
    assemble: float
    total: float

class DonorRecord:
    """One donor of a rebirth."""
    rank: int
    version: int
    metric: float
    weight: float
    bytes: int
    transport: str
    skipped: bool
    staleness_seconds: float

class StepEvent:
    """What one step did (see docs/agent.md)."""
    rank: int
    iteration: int
    step: int
    metric: float
    died: bool
    reason: str
    deferred: bool
    paused: bool
    note: str
    age: int
    max_age: int
    next_max_age: int
    generation: int
    mixing: str
    donors: List[DonorRecord]
    bytes: int
    published: bool
    publish_skipped: bool
    publish_attempts: int
    version: int
    seconds: PhaseSeconds
    hyper: Hyper
    hyper_before: Hyper
    def to_json(self) -> str: ...

class CheckpointLoad:
    """What a checkpoint load restored on this rank."""
    path: str
    agents: int
    source: int
    reborn: bool
    steps: int

class TimerSummary:
    """count/min/median/max/total/mean of a timer."""
    count: int
    min: float
    median: float
    max: float
    total: float
    mean: float
    median_exact: bool

class AgentStats:
    """Counters and phase timers over an agent's steps."""
    steps: int
    deaths: int
    deferred: int
    pulls: int
    bytes_pulled: int
    donors_used: int
    publishes: int
    publishes_skipped: int
    rebirth_timer: TimerSummary
    def deaths_by(self, reason: str) -> int: ...
    def timer(self, phase: str) -> TimerSummary: ...

class TriggerContext:
    """What a custom trigger sees."""
    rank: int
    population: int
    iteration: int
    step: int
    age: int
    max_age: int
    metric: float
    generation: int

class SelectionContext:
    """What a custom selection function sees (valid during the call)."""
    rank: int
    population: int
    direction: str
    want: int
    candidates: List[Tuple[int, float]]
    seed: int

class Window:
    """ParameterWindow over host or device memory (see paramwin.ParameterWindow)."""
    def __init__(self, comm: Any, layout: Layout, transport: str, wire: str, layout_check: str,
                 verify: bool, progress_thread: bool, progress_interval_us: int,
                 name: str, memory: str = ..., cuda_device: int = ...,
                 suspect_seconds: Optional[float] = ...,
                 suspect_beats: Optional[float] = ...) -> None: ...
    def close(self) -> None: ...
    valid: bool
    rank: int
    size: int
    layout: Layout
    name: str
    memory: str
    version: int
    fingerprint: int
    wire_bytes: int
    has_rma_readers: bool
    pending_rma: int
    status: AgentStatus
    def transport_for(self, rank: int) -> str: ...
    def progress(self) -> None: ...
    def publish(self, layers: Sequence[Descriptor], stamp: int, hyper: Optional[Hyper]) -> PublishResult: ...
    def pull(self, donors: List[int], layers: Sequence[Descriptor], reduction: str,
             weights: List[float], momentum: float, non_finite: str, read_mode: str,
             optimistic_attempts: int, chunk_bytes: int, timeout_seconds: float) -> PullResult: ...
    def roster(self, rank: int, timeout_seconds: float) -> RosterEntry: ...
    def roster_all(self, timeout_seconds: float) -> List[RosterEntry]: ...
    def set_status(self, iteration: int, age: int, metric: float, generation: int,
                   state: str) -> None: ...

class _Member:
    """The calls Agent and GroupAgent share (AgentInterface)."""
    def step(self, iteration: int, metric: float, layers: Sequence[Descriptor]) -> StepEvent: ...
    def publish(self, layers: Sequence[Descriptor]) -> PublishResult: ...
    def leave(self) -> None: ...
    def progress(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    is_paused: bool
    def close(self) -> None: ...
    valid: bool
    hyperparameters: Hyper
    def set_hyperparameters(self, values: Mapping[str, Number]) -> None: ...
    layout: Layout
    memory: str
    steps: int
    age: int
    max_age: int
    generation: int
    stats: AgentStats
    event_log: str
    def summary(self) -> str: ...
    def save_checkpoint(self, path: str, layers: Sequence[Descriptor]) -> None: ...
    def load_checkpoint(self, path: str, layers: Sequence[Descriptor]) -> CheckpointLoad: ...
    def resume_newest(self, layers: Sequence[Descriptor]) -> Optional[CheckpointLoad]: ...
    def wait_checkpoint(self) -> None: ...
    def set_checkpoint_hooks(self, save: Optional[Callable[[], Dict[str, bytes]]],
                             load: Optional[Callable[[Dict[str, bytes], bool], None]]) -> None: ...
    def roster_all(self, timeout_seconds: float = ...) -> List[RosterEntry]: ...

class Agent(_Member):
    """Agent over a host or device window (see paramwin.Agent)."""
    def __init__(self, comm: Any, layout: Layout, config: Mapping[str, str],
                 hooks: Mapping[str, Optional[Callable[..., Any]]], transport: str,
                 verify: bool, name: str, memory: str = ..., cuda_device: int = ...,
                 suspect_seconds: Optional[float] = ...,
                 suspect_beats: Optional[float] = ...) -> None: ...
    def roster(self, rank: int, timeout_seconds: float = ...) -> RosterEntry: ...
    rank: int
    size: int
    version: int

class ElasticAgent:
    """ElasticAgent over a host window (see paramwin.ElasticAgent)."""
    def __init__(self, comm: Any, layout: Layout, config: Mapping[str, str],
                 hooks: Mapping[str, Optional[Callable[..., Any]]], transport: str, name: str,
                 members: int, replacement: str, check_seconds: float,
                 dead_after_seconds: float, agree_seconds: float,
                 suspect_seconds: Optional[float] = ...,
                 suspect_beats: Optional[float] = ..., spawn_pool: int = ...,
                 spawn_command: Optional[str] = ...,
                 spawn_args: Optional[List[str]] = ..., join_service: str = ...,
                 joining: bool = ..., spawn_low: int = ...,
                 spawn_ahead: bool = ...) -> None: ...
    def wait_for_slot(self) -> bool: ...
    def step(self, iteration: int, metric: float, layers: Sequence[Descriptor]) -> StepEvent: ...
    def resign(self) -> None: ...
    def finish(self, layers: Optional[Sequence[Descriptor]] = ...) -> None: ...
    def members_gather(self, value: float) -> List[float]: ...
    member: bool
    joined: bool
    slot: int
    slots: int
    epoch: int
    members: List[int]
    spares: List[int]
    world_rank: int
    refills: Dict[str, Any]
    resume_iteration: int
    version: int
    generation: int
    hyperparameters: Hyper
    def set_hyperparameters(self, values: Mapping[str, Number]) -> None: ...

class ElasticAveragingAgent:
    """ElasticAveragingAgent over a host window (see paramwin.ElasticAveragingAgent)."""
    def __init__(self, comm: Any, layout: Layout, options: Mapping[str, Any], members: int,
                 replacement: str, check_seconds: float, dead_after_seconds: float,
                 agree_seconds: float) -> None: ...
    def wait_for_slot(self) -> bool: ...
    def step(self, layers: Sequence[Descriptor]) -> AveragingRound: ...
    def resign(self) -> None: ...
    def finish(self, layers: Optional[Sequence[Descriptor]] = ...) -> None: ...
    def members_gather(self, value: float) -> List[float]: ...
    member: bool
    slot: int
    slots: int
    epoch: int
    members: List[int]
    world_rank: int
    resume_iteration: int
    joining: bool
    version: int
    steps: int

class AgentGroups:
    """AgentGroups (see paramwin.AgentGroups)."""
    def __init__(self, comm: Any, ranks_per_agent: int, buffer_ranks: int, coordinator: bool,
                 assignment: List[int]) -> None: ...
    def close(self) -> None: ...
    valid: bool
    role: str
    is_agent_rank: bool
    world_rank: int
    world_size: int
    agents: int
    agent: int
    rank_in_agent: int
    uniform: bool
    def agent_size(self, id: int = ...) -> int: ...
    def agent_ranks(self, id: int) -> List[int]: ...
    buffer_ranks: List[int]
    coordinator_rank: int
    agent_comm: Any
    shard_comm: Any
    training_comm: Any
    role_comm: Any

class GroupAgent(_Member):
    """GroupAgent (see paramwin.GroupAgent); memory="cuda": a device window."""
    def __init__(self, groups: AgentGroups, layout: Layout, config: Mapping[str, str],
                 hooks: Mapping[str, Optional[Callable[..., Any]]], transport: str,
                 verify: bool, name: str, memory: str = ..., cuda_device: int = ...,
                 suspect_seconds: Optional[float] = ...,
                 suspect_beats: Optional[float] = ...) -> None: ...
    agent: int
    agents: int
    rank_in_agent: int
    ranks_per_agent: int
    leader: bool
    epoch: int

class AveragingPeer:
    """One peer of an averaging round."""
    rank: int
    version: int
    stamp: int
    weight: float
    skipped: str
    transport: str

class AveragingRound:
    """What one averaging step (or finish) did."""
    rank: int
    step: int
    round: int
    kind: str
    applied: bool
    background_applied: bool
    overlapped: bool
    read_step: int
    started_round: int
    busy: bool
    received: int
    self_weight: float
    peers: List[AveragingPeer]
    note: str
    paused: bool
    published: bool
    joining: bool
    version: int
    bytes: int
    seconds: float
    def to_json(self) -> str: ...

def topology_peers(kind: str, k: int, seed: int, neighbours: List[List[int]],
                   custom: Optional[Callable[[int, int, int], List[int]]], round: int, rank: int,
                   size: int) -> List[int]: ...

class HierarchicalRound:
    """What one hierarchical averaging step (or finish) did."""
    group: int
    group_size: int
    group_seconds: float
    across: AveragingRound

class _AveragingCalls:
    """The calls both averaging agents offer (python/src/averaging.cpp's bind_calls)."""
    def publish(self, layers: Sequence[Descriptor]) -> PublishResult: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def is_paused(self) -> bool: ...
    def close(self) -> None: ...
    def save_checkpoint(self, path: str, layers: Sequence[Descriptor]) -> None: ...
    def load_checkpoint(self, path: str, layers: Sequence[Descriptor]) -> CheckpointLoad: ...
    valid: bool
    steps: int
    layout: Layout

class AveragingAgent(_AveragingCalls):
    """AveragingAgent (see paramwin.AveragingAgent)."""
    def __init__(self, comm: Any, layout: Layout, options: Mapping[str, Any]) -> None: ...
    def step(self, layers: Sequence[Descriptor]) -> AveragingRound: ...
    def finish(self, layers: Sequence[Descriptor]) -> AveragingRound: ...
    rank: int
    size: int
    rounds: int
    version: int
    background_inline_reason: str
    memory: str
    def roster_all(self, timeout_seconds: float = ...) -> List[RosterEntry]: ...
    def set_checkpoint_hooks(self, save: Optional[Callable[[], Dict[str, bytes]]],
                             load: Optional[Callable[[Dict[str, bytes], bool], None]]) -> None: ...

class HierarchicalAveragingAgent(_AveragingCalls):
    """HierarchicalAveragingAgent (see paramwin.HierarchicalAveragingAgent)."""
    def __init__(self, groups: AgentGroups, layout: Layout, options: Mapping[str, Any]) -> None: ...
    def step(self, layers: Sequence[Descriptor]) -> HierarchicalRound: ...
    def finish(self, layers: Sequence[Descriptor]) -> HierarchicalRound: ...
    group: int
    groups: int
    rank_in_group: int
    group_size: int
    leader: bool
    rounds: int
