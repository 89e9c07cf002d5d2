# Type stubs of the numarena package (python/numarena/__init__.py): its public API with types,
# for type checkers and editors. tests/python/stubs_test.sh checks them against the module
# with mypy's stubtest, so a change to the module that the stubs do not follow fails.
import enum
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from ._capi import (FailedPreconditionError as FailedPreconditionError,
                    InvalidArgumentError as InvalidArgumentError, NotFoundError as NotFoundError,
                    NumarenaError as NumarenaError, OutOfRangeError as OutOfRangeError,
                    PermissionDeniedError as PermissionDeniedError,
                    ResourceExhaustedError as ResourceExhaustedError,
                    SystemNumarenaError as SystemNumarenaError,
                    UnimplementedError as UnimplementedError)

# A buffer (bytes-like, writable for prefault/correct) or an int address.
_Target = Any

__version__: str
library_path: str
NODE_NONE: int
NODE_MIXED: int
__all__ = [
    "Admission", "Arena", "Budget", "BudgetNode", "FailedPreconditionError",
    "InvalidArgumentError", "NODE_MIXED", "NODE_NONE", "Node", "NodeBuffer", "NodeState",
    "NotFoundError", "NumarenaError", "OutOfRangeError", "PageNodes", "PermissionDeniedError",
    "PlacementReport", "Priority", "ResourceExhaustedError", "SystemNumarenaError",
    "UnimplementedError", "__version__", "correct", "current_node", "distance", "library_path",
    "metrics_text", "node_of", "nodes", "owns", "page_nodes", "prefault", "topology_summary",
    "version",
]

def version() -> str: ...

@dataclass(frozen=True)
class Node:
    id: int
    cpu_count: int
    allowed: bool
    mem_total_bytes: int
    mem_free_bytes: int
    distances: Dict[int, int] = ...

def nodes() -> List[Node]: ...
def distance(from_node: int, to_node: int) -> int: ...
def current_node() -> int: ...
def topology_summary() -> str: ...

@dataclass(frozen=True)
class PageNodes:
    pages_on_node: Dict[int, int]
    total_pages: int
    not_resident: int
    unmapped: int

def page_nodes(target: _Target, length: Optional[int] = None) -> PageNodes: ...

@dataclass(frozen=True)
class PlacementReport:
    node: int
    pages_checked: int
    already_local: int
    moved: int
    not_resident: int
    failed: int

def prefault(target: _Target, node: int, length: Optional[int] = None) -> PlacementReport: ...
def correct(target: _Target, node: int, length: Optional[int] = None) -> PlacementReport: ...
def owns(target: _Target) -> bool: ...
def node_of(target: _Target) -> int: ...

class Arena:
    def __init__(self, handle: Any, owned: bool = False) -> None: ...
    @classmethod
    def for_node(cls, node: int) -> Arena: ...
    @classmethod
    def for_policy(cls, policy: Union[str, bytes]) -> Arena: ...
    @classmethod
    def create(cls, policy: Union[str, bytes], *, shards: int = 0,
               hugetlb_page_bytes: int = 0) -> Arena: ...
    @property
    def options(self) -> Dict[str, int]: ...
    @property
    def destroyed(self) -> bool: ...
    def destroy(self) -> None: ...
    @property
    def policy(self) -> str: ...
    def purge(self) -> None: ...
    def buffer(self, size: int, *, alignment: Optional[int] = None,
               zero: bool = False) -> NodeBuffer: ...
    def contains(self, target: _Target) -> bool: ...

# At run time each NodeBuffer is also a ctypes array of c_ubyte (a per-size subclass of
# NodeBuffer and c_ubyte * size): it supports the buffer protocol, len() and indexing.
class NodeBuffer:
    def __new__(cls, size: int, node: Optional[int] = None, policy: Optional[str] = None, *,
                arena: Optional[Arena] = None, alignment: Optional[int] = None,
                zero: bool = False) -> NodeBuffer: ...
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def view(self) -> memoryview: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> NodeBuffer: ...
    def __exit__(self, *exc: object) -> None: ...
    @property
    def address(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def arena(self) -> Arena: ...
    @property
    def usable_size(self) -> int: ...
    @property
    def node(self) -> int: ...
    def page_nodes(self) -> PageNodes: ...
    def prefault(self, node: Optional[int] = None) -> PlacementReport: ...
    def correct(self, node: Optional[int] = None) -> PlacementReport: ...
    def __reduce__(self) -> Any: ...

class NodeState(enum.IntEnum):
    NORMAL = 0
    WARN = 1
    ADMISSION_CLOSED = 2
    TRIPPED = 3

class Priority(enum.IntEnum):
    HIGH = 0
    NORMAL = 1
    LOW = 2

class Admission(enum.IntEnum):
    OK = 0
    LATER = 1
    NEVER = 2

@dataclass(frozen=True)
class BudgetNode:
    node: int
    state: NodeState
    capacity: int
    usage: int
    peak: int
    warn_bytes: int
    admission_bytes: int
    trip_bytes: int
    numarena_bytes: int
    refusals: int

class Budget:
    spec: str
    def __init__(self, spec: str = "system") -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def installed(self) -> bool: ...
    def install(self) -> None: ...
    def uninstall(self) -> None: ...
    def close(self) -> None: ...
    def snapshot(self) -> List[BudgetNode]: ...
    def admit(self, node: int, nbytes: int, priority: Priority = Priority.NORMAL) -> Admission: ...
    def __enter__(self) -> Budget: ...
    def __exit__(self, *exc: object) -> None: ...

def metrics_text(arenas: Optional[Sequence[Arena]] = None,
                 budget: Optional[Budget] = None) -> str: ...
