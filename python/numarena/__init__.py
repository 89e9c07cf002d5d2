"""numarena from Python: NUMA-placed memory, where pages are, moving them, a per-node budget.

Plain ctypes over libnumarena.so (numarena's C API, include/numarena/numarena.h); no other
dependency. numpy is optional: NodeBuffer works with numpy.frombuffer, and page_nodes /
prefault / correct take a numpy array, but the module never imports numpy.

    import numarena, numpy
    with numarena.NodeBuffer(1 << 30, node=1) as buf:        # pages bound to node 1
        weights = numpy.frombuffer(buf, dtype=numpy.float16)  # no copy
        ...
        del weights                                           # before the buffer closes
    numarena.prefault(tensor_array, node=0)                  # any memory: bind, fault, move
    print(numarena.page_nodes(tensor_array).pages_on_node)   # {0: 262144}

The library is found at NUMARENA_LIBRARY (a path) when set, else next to this file, else by
the dynamic loader (LD_LIBRARY_PATH, ld.so.cache); importing fails with ImportError saying
where it looked when none loads.

Errors: a failed C API call raises a subclass of NumarenaError that is also the matching
built-in exception, with the library's message: InvalidArgumentError (ValueError),
ResourceExhaustedError (MemoryError), PermissionDeniedError (PermissionError),
FailedPreconditionError (RuntimeError), NotFoundError (FileNotFoundError),
SystemNumarenaError (OSError). Wrong Python types raise TypeError before the library is
called. Every function may be called from any thread.
"""
import ctypes
import enum
import threading
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import _capi
from ._capi import (FailedPreconditionError, InvalidArgumentError, NotFoundError,
                    NumarenaError, OutOfRangeError, PermissionDeniedError,
                    ResourceExhaustedError, SystemNumarenaError, UnimplementedError)

__version__ = "0.1.0"
"""This package's version: the project's (CMakeLists.txt), checked by tests/python/stubs_test.sh."""

_lib = _capi.lib
library_path = _capi.library_path
"""The path (or soname) libnumarena.so was loaded from."""

NODE_NONE = -1
"""node_of() of memory numarena does not own."""
NODE_MIXED = -2
"""node_of() of memory from an interleaved or multi-node arena."""

__all__ = [
    "Admission", "Arena", "BlockLocation", "Budget", "BudgetNode", "FailedPreconditionError",
    "InvalidArgumentError", "KvPool", "NODE_MIXED", "NODE_NONE", "Node", "NodeBuffer",
    "NodeState",
    "NotFoundError", "NumarenaError", "OutOfRangeError", "PageNodes", "PermissionDeniedError",
    "PlacementReport", "Priority", "ResourceExhaustedError", "SystemNumarenaError",
    "UnimplementedError", "__version__", "correct", "current_node", "distance", "library_path",
    "metrics_text", "node_of", "nodes", "owns", "page_nodes", "prefault", "topology_summary",
    "version",
]


def version():
    """The library's version string, e.g. "0.1.0"."""
    return _lib.numarena_version().decode()


def _check_int(value, what):
    # bool is an int subclass, but node=True is a bug, not node 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"numarena: {what} must be an int, not {type(value).__name__}")
    return value


def _check_size(value, what):
    _check_int(value, what)
    if value < 0 or value >= 1 << 64:
        raise InvalidArgumentError(_capi.INVALID_ARGUMENT,
                                   f"numarena: {what} {value} is not a size (0 .. 2**64-1)")
    return value


def _check_c_int(value, what):
    _check_int(value, what)
    if not -(1 << 31) <= value < 1 << 31:
        # ctypes would silently truncate it to another node id.
        raise InvalidArgumentError(_capi.INVALID_ARGUMENT,
                                   f"numarena: {what} {value} is out of range")
    return value


# ---- topology -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    """One online NUMA node as the library discovered it.

    id: the node number. cpu_count: its CPUs (0 for a memory-only node: CXL, HBM).
    allowed: whether this process may allocate there (cpuset, mems_allowed).
    mem_total_bytes, mem_free_bytes: its memory (free: when the topology was read).
    distances: SLIT distance to every online node (10 = local)."""
    id: int
    cpu_count: int
    allowed: bool
    mem_total_bytes: int
    mem_free_bytes: int
    distances: Dict[int, int] = field(default_factory=dict)


def _node_infos():
    count = ctypes.c_size_t(0)
    code = _lib.numarena_topology_nodes(None, 0, ctypes.byref(count))
    if code not in (_capi.OK, _capi.OUT_OF_RANGE):
        raise _capi.last_error()
    while True:
        infos = (_capi.NodeInfo * max(count.value, 1))()
        code = _lib.numarena_topology_nodes(infos, len(infos), ctypes.byref(count))
        if code == _capi.OK:
            return list(infos)[:count.value]
        if code != _capi.OUT_OF_RANGE:  # nodes came online between the calls: ask again
            raise _capi.last_error()


def nodes():
    """The machine's online nodes, ascending by id, each with its distances.

    Raises NotFoundError / SystemNumarenaError when the kernel's topology files cannot be
    read (no NUMA support)."""
    infos = _node_infos()
    ids = [info.id for info in infos]
    return [Node(info.id, info.cpu_count, bool(info.allowed), info.mem_total_bytes,
                 info.mem_free_bytes, {other: distance(info.id, other) for other in ids})
            for info in infos]


def distance(from_node, to_node):
    """The SLIT distance from `from_node` to `to_node` (10 = local). InvalidArgumentError for
    a node that is not online."""
    result = _lib.numarena_distance(_check_c_int(from_node, "from_node"),
                                    _check_c_int(to_node, "to_node"))
    if result < 0:
        raise _capi.last_error()
    return result


def current_node():
    """The node of the CPU the calling thread runs on now (it may change at the next
    scheduling decision unless the thread is pinned)."""
    result = _lib.numarena_current_node()
    if result < 0:
        raise _capi.last_error()
    return result


def topology_summary():
    """A human-readable summary: nodes, CPUs, memory, distances, devices, and what the
    process may use."""
    length, text = _capi.read_text(_lib.numarena_topology_summary)
    if length == 0:
        raise _capi.last_error()
    return text


# ---- addresses: anything with a buffer, or an int address and a length --------------------

class _PyBuffer(ctypes.Structure):
    # CPython's Py_buffer (Include/pybuffer.h), unchanged since Python 3.3.
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.restype = ctypes.c_int
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.restype = None
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_PyBUF_SIMPLE = 0
_PyBUF_WRITABLE = 1


def _get_buffer_readonly(target):
    """True when `target` exports a buffer, but only a read-only one."""
    view = _PyBuffer()
    try:
        if _get_buffer(target, ctypes.byref(view), _PyBUF_SIMPLE) != 0:
            return False
    except (TypeError, BufferError, ValueError):
        return False
    _release_buffer(ctypes.byref(view))
    return True


class _Span:
    """[address, address + length) of `target`, with its buffer held (so a bytearray cannot
    be resized, nor a buffer freed, while numarena works on it) until the `with` ends."""

    def __init__(self, target, length, what, writable=False):
        self._view = None
        if isinstance(target, int) and not isinstance(target, bool):
            if length is None:
                raise TypeError(f"numarena.{what}: an int address needs a length")
            self.address = _check_size(target, "address")
            self.length = _check_size(length, "length")
            return
        if isinstance(target, NodeBuffer):
            target._check_open(what)
        view = _PyBuffer()
        try:
            # PyBUF_SIMPLE: one contiguous block of bytes, read-only allowed unless asked.
            flags = _PyBUF_WRITABLE if writable else _PyBUF_SIMPLE
            if _get_buffer(target, ctypes.byref(view), flags) != 0:
                raise BufferError("PyObject_GetBuffer failed")
        except (TypeError, BufferError, ValueError) as error:  # numpy: ValueError
            if writable and _get_buffer_readonly(target):
                raise TypeError(
                    f"numarena.{what}: {type(target).__name__} is read-only memory; {what} binds "
                    "and moves pages, so it takes writable memory the caller owns (bytearray, "
                    "a writable numpy array, mmap, NodeBuffer)") from None
            raise TypeError(
                f"numarena.{what}: {type(target).__name__} is neither an int address nor a "
                f"contiguous buffer (bytearray, memoryview, numpy array, NodeBuffer): "
                f"{error}") from None
        self._view = view
        self.address = view.buf or 0
        self.length = view.len
        if length is not None:
            try:
                _check_size(length, "length")
                if length > view.len:
                    raise InvalidArgumentError(
                        _capi.INVALID_ARGUMENT,
                        f"numarena.{what}: length {length} is more than the buffer's "
                        f"{view.len} bytes")
            except BaseException:
                self.close()  # the caller never gets the span to release
                raise
            self.length = length

    def close(self):
        if self._view is not None:
            _release_buffer(ctypes.byref(self._view))
            self._view = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass(frozen=True)
class PageNodes:
    """Where the pages of a range are (numarena_page_nodes).

    pages_on_node: resident pages per node ({} when none). total_pages: pages in the range,
    widened to whole pages. not_resident: never touched or purged. unmapped: not mapped (or
    another per-page error). total_pages == sum(pages_on_node.values()) + not_resident +
    unmapped."""
    pages_on_node: Dict[int, int]
    total_pages: int
    not_resident: int
    unmapped: int


def _node_slots():
    return max(info.id for info in _node_infos()) + 1


def page_nodes(target, length=None):
    """Asks the kernel where each resident page of `target` is (move_pages without a target:
    no page is faulted in or moved).

    `target`: a contiguous buffer (bytearray, memoryview, mmap, a C-contiguous numpy array,
    a NodeBuffer) whose first `length` bytes (default: all) are examined, or an int address
    with a `length`. Returns PageNodes. InvalidArgumentError for a range past the address
    space or a length longer than the buffer, PermissionDeniedError when the kernel refuses,
    TypeError for anything else."""
    with _Span(target, length, "page_nodes") as span:
        slots = _node_slots()
        while True:
            on_node = (ctypes.c_size_t * slots)()
            counts = _capi.PageCounts()
            _capi.check(_lib.numarena_page_nodes(span.address, span.length, on_node, slots,
                                                 ctypes.byref(counts)))
            if counts.on_other_nodes == 0:
                break
            slots *= 2  # a node came online since the topology was read
    return PageNodes({n: on_node[n] for n in range(slots) if on_node[n]}, counts.total_pages,
                     counts.not_resident, counts.unmapped)


@dataclass(frozen=True)
class PlacementReport:
    """What prefault / correct found and did, in pages: pages_checked == already_local +
    moved + not_resident + failed. `failed`: pages the kernel would not move (not an error
    of the call)."""
    node: int
    pages_checked: int
    already_local: int
    moved: int
    not_resident: int
    failed: int


def _placement(function, what, target, node, length):
    _check_c_int(node, "node")
    with _Span(target, length, what, writable=True) as span:
        report = _capi.PlacementReport()
        _capi.check(function(span.address, span.length, node, ctypes.byref(report)))
    return PlacementReport(report.node, report.pages_checked, report.already_local,
                           report.moved, report.not_resident, report.failed)


def prefault(target, node, length=None):
    """Binds `target`'s pages to `node`, faults every one in there and migrates those already
    resident elsewhere (numarena::prefault). `target` as in page_nodes (it must be writable
    memory the caller owns: the pages are touched). Returns a PlacementReport.
    InvalidArgumentError for a bad node or an unmapped range, PermissionDeniedError when the
    kernel refuses, ResourceExhaustedError when the node cannot take the pages."""
    return _placement(_lib.numarena_prefault, "prefault", target, node, length)


def correct(target, node, length=None):
    """Migrates `target`'s resident pages that are not on `node` to it, never faulting a page
    in (numarena::correct). Arguments, result and errors as prefault."""
    return _placement(_lib.numarena_correct, "correct", target, node, length)


def owns(target):
    """True when `target` (an int address or a buffer) points into numarena's arenas."""
    with _Span(target, 0, "owns") as span:
        return bool(_lib.numarena_owns(span.address))


def node_of(target):
    """The node the arena of `target` (an int address or a buffer) places its pages on:
    NODE_MIXED for an interleaved or multi-node arena, NODE_NONE when numarena does not own
    it. No system call: the placement asked for; page_nodes says where pages really are."""
    with _Span(target, 0, "node_of") as span:
        return _lib.numarena_node_of(span.address)


# ---- arenas and node buffers ------------------------------------------------------------------

class Arena:
    """A numarena arena: a heap whose pages are placed by one policy, bound before first
    touch. Arenas live for the whole process; the same node or policy gives the same arena.

    Use Arena.for_node(n) or Arena.for_policy("interleave(0-3)") (the syntax of
    numarena::Policy::Parse, shared with the CLI and `numarena run`: "bind(1)",
    "bind(0-1)/advisory", "preferred(2)", "interleave(0-3)", "weighted(0:3,1:1)",
    "weighted(0:1,1:1)/chunk=64K", "local"). Both raise InvalidArgumentError for a node that
    is not online or a malformed string (the message shows the syntax),
    PermissionDeniedError / FailedPreconditionError when the kernel refuses a strict policy."""

    _known: Dict[int, "Arena"] = {}
    _known_lock = threading.Lock()

    def __init__(self, handle, owned=False):
        self._handle = handle
        self._owned = owned  # made by Arena.create: the caller's to destroy
        # The finalizers of this arena's NodeBuffers (owned arenas): alive while a buffer's
        # memory is not yet freed. Finalizers, not the buffers: a NodeBuffer is a ctypes array,
        # which cannot be hashed into a WeakSet.
        self._buffers = set()
        self._lock = threading.Lock()

    @classmethod
    def _from_handle(cls, handle):
        if not handle:
            raise _capi.last_error()
        with cls._known_lock:
            return cls._known.setdefault(handle, cls(handle))

    @classmethod
    def for_node(cls, node):
        """The arena that binds strictly to `node`."""
        return cls._from_handle(_lib.numarena_arena_for_node(_check_c_int(node, "node")))

    @staticmethod
    def _policy_bytes(policy):
        if not isinstance(policy, str):
            raise TypeError(f"numarena: the policy must be a str, not {type(policy).__name__}")
        if "\0" in policy:
            raise InvalidArgumentError(_capi.INVALID_ARGUMENT,
                                       f"numarena: the policy {policy!r} contains a NUL byte")
        return policy.encode()

    @classmethod
    def for_policy(cls, policy):
        """The arena for a policy string (see the class's documentation)."""
        return cls._from_handle(_lib.numarena_arena_for_policy(cls._policy_bytes(policy)))

    @classmethod
    def create(cls, policy, *, shards=0, hugetlb_page_bytes=0):
        """A new arena of its own for a policy string, never shared (every call makes
        another), which destroy() takes down again. `shards` and `hugetlb_page_bytes` are
        numarena::ArenaOptions: jemalloc arenas per heap (0: one per 4 CPUs; 1 to 8), and 0
        for ordinary pages or 2 MiB / 1 GiB for hugetlbfs pages from the bound node's own
        pool. Errors as for_policy; InvalidArgumentError for options out of range,
        FailedPreconditionError when the node's huge page pool is empty, and
        ResourceExhaustedError when numarena's heap table (256) is full.

            arena = numarena.Arena.create("bind(1)", shards=2)
        """
        options = _capi.ArenaOptions(ctypes.sizeof(_capi.ArenaOptions),
                                     _check_size(hugetlb_page_bytes, "hugetlb_page_bytes"),
                                     _check_c_int(shards, "shards"))
        handle = _lib.numarena_arena_create_with_options(cls._policy_bytes(policy),
                                                         ctypes.byref(options))
        if not handle:
            raise _capi.last_error()
        return cls(handle, owned=True)

    @property
    def options(self):
        """The options the arena was made with, as a dict: {"shards": n,
        "hugetlb_page_bytes": b} (shards 0: the default count)."""
        if self._handle is None:
            raise FailedPreconditionError(_capi.FAILED_PRECONDITION,
                                          "numarena.Arena.options: the arena was destroyed")
        options = _capi.ArenaOptions(ctypes.sizeof(_capi.ArenaOptions), 0, 0)
        if _lib.numarena_arena_options_of(self._handle, ctypes.byref(options)) != 0:
            raise _capi.last_error()
        return {"shards": options.shards, "hugetlb_page_bytes": options.hugetlb_page_bytes}

    @property
    def destroyed(self):
        """True once destroy() took the arena down."""
        return self._handle is None

    def destroy(self):
        """Destroys an arena made by Arena.create: its memory goes back to the kernel and its
        budget charge is released (numarena::Arena::Destroy). Raises FailedPreconditionError,
        with nothing destroyed, for a shared arena (for_node / for_policy) and while a
        NodeBuffer of it is still open: close those first, their memory would vanish under
        their views. A second call does nothing; the arena cannot be used afterwards."""
        with self._lock:
            if self._handle is None:
                return
            if not self._owned:
                raise FailedPreconditionError(
                    _capi.FAILED_PRECONDITION,
                    f"numarena.Arena.destroy: the arena {self.policy} is shared (for_node / "
                    "for_policy) and lives for the process; only Arena.create's can be destroyed")
            still_open = sum(1 for finalizer in self._buffers if finalizer.alive)
            if still_open:
                raise FailedPreconditionError(
                    _capi.FAILED_PRECONDITION,
                    f"numarena.Arena.destroy: {still_open} NodeBuffer(s) of the arena are still "
                    "open; close them (buf.close() or a with block) first")
            if _lib.numarena_arena_destroy(self._handle) != 0:
                raise _capi.last_error()
            self._handle = None

    @property
    def policy(self):
        """The arena's policy in canonical form (as Arena.for_policy reads it)."""
        if self._handle is None:
            return "(destroyed)"
        return _capi.read_text(lambda b, n: _lib.numarena_arena_policy(self._handle, b, n),
                               256)[1]

    def purge(self):
        """Returns the arena's unused dirty pages to the kernel now, and their budget
        charge."""
        if self._handle is not None:
            _lib.numarena_arena_purge(self._handle)

    def buffer(self, size, *, alignment=None, zero=False):
        """A NodeBuffer of `size` bytes from this arena (see NodeBuffer)."""
        return NodeBuffer(size, arena=self, alignment=alignment, zero=zero)

    def contains(self, target):
        """True when this arena allocated `target` (an int address or a buffer): an arena of
        Arena.create contains nothing another arena handed out, even on the same node. False
        for a destroyed arena."""
        with _Span(target, 0, "Arena.contains") as span:
            if self._handle is None:
                return False
            return bool(_lib.numarena_arena_contains(self._handle, span.address))

    def __repr__(self):
        return f"<numarena.Arena {self.policy}>"


def _free(address):
    _lib.numarena_free(address)


class NodeBuffer(_capi.buffer_module.Exporter):
    """`size` bytes of numarena memory placed on a node or by a policy, exposed through the
    buffer protocol without a copy: buf.view() and memoryview(buf) (format "B"),
    numpy.frombuffer(buf, dtype=...), bytes(buf), buf[i], buf[i:j] (a bytes copy),
    (ctypes.c_ubyte * n).from_buffer(buf) all see the numarena memory itself.

        NodeBuffer(size, node=1)                         # bound to node 1 (strict)
        NodeBuffer(size, policy="interleave(0-3)")       # a policy string (see Arena)
        NodeBuffer(size, arena=Arena.for_node(0), alignment=4096, zero=True)

    Exactly one of node, policy, arena. `alignment`: a power of two (default 16, malloc's);
    `zero`: zero-filled (calloc) instead of uninitialised. Pages are bound before they are
    first touched, so writing them faults them in where the policy says. buf.address is
    its address (an int).

    Lifetime, as mmap.mmap's: the memory is freed exactly once, by close() (or leaving a
    `with` block), or else when the buffer is garbage-collected. Every view (memoryview,
    numpy array, ctypes from_buffer) holds the buffer, so without close() the memory lives as
    long as any view. close() while a view exists raises BufferError and frees nothing:
    release the views first (del, memoryview.release()). After close(), every access -- a new
    view, numpy.frombuffer, indexing, the methods and properties but `size`, `closed`,
    `arena` -- raises ValueError.

    Errors (on creation): InvalidArgumentError (bad node, policy, size or alignment),
    ResourceExhaustedError (a MemoryError: the node or the budget is full), TypeError for
    wrong argument types."""

    def __new__(cls, size, node=None, policy=None, *, arena=None, alignment=None, zero=False):
        _check_size(size, "size")
        chosen = [name for name, value in (("node", node), ("policy", policy), ("arena", arena))
                  if value is not None]
        if len(chosen) != 1:
            raise TypeError("numarena.NodeBuffer: give exactly one of node=, policy=, arena= "
                            f"(got {', '.join(chosen) or 'none'})")
        if node is not None:
            arena = Arena.for_node(node)
        elif policy is not None:
            arena = Arena.for_policy(policy)
        elif not isinstance(arena, Arena):
            raise TypeError(f"numarena.NodeBuffer: arena must be a numarena.Arena, not "
                            f"{type(arena).__name__}")
        if alignment is not None:
            _check_size(alignment, "alignment")
            if alignment == 0 or alignment & (alignment - 1):
                raise InvalidArgumentError(
                    _capi.INVALID_ARGUMENT,
                    f"numarena.NodeBuffer: alignment {alignment} is not a power of two")
        # Under the arena's lock: Arena.destroy() must see every buffer of its arena.
        with arena._lock:
            if arena._handle is None:
                raise FailedPreconditionError(
                    _capi.FAILED_PRECONDITION,
                    "numarena.NodeBuffer: the arena was destroyed (Arena.destroy)")
            if zero and alignment is None:
                address = _lib.numarena_calloc(arena._handle, 1, size)
            elif alignment is not None:
                address = _lib.numarena_aligned_alloc(arena._handle, alignment, size)
            else:
                address = _lib.numarena_malloc(arena._handle, size)
            if not address:
                raise _capi.last_error()
            try:
                if zero and alignment is not None:
                    ctypes.memset(address, 0, size)
                self = super().__new__(cls)
                _capi.buffer_module.Exporter.__init__(self, address, size)
            except BaseException:
                _free(address)
                raise
            self._address = address
            self._size = size
            self._arena = arena
            # Frees once, whichever comes first: close() or collection. Not at interpreter exit
            # (atexit=False): other exit handlers may still use views of the memory.
            self._finalizer = weakref.finalize(self, _free, address)
            self._finalizer.atexit = False
            if arena._owned:
                if len(arena._buffers) >= 1024:  # forget the freed ones now and then
                    arena._buffers = {f for f in arena._buffers if f.alive}
                arena._buffers.add(self._finalizer)
        return self

    def __init__(self, *args, **kwargs):
        # The exporter was initialised in __new__ with the memory's address and size.
        pass

    def _check_open(self, what):
        if self._exporter_closed or not self._finalizer.alive:
            raise ValueError(f"numarena.NodeBuffer.{what}: the buffer is closed")

    def view(self):
        """A writable memoryview of the bytes (format "B"); memoryview(buf) is the same."""
        self._check_open("view")
        return memoryview(self)

    @property
    def closed(self):
        """True once close() freed the memory (or Arena.destroy() did)."""
        return self._exporter_closed or not self._finalizer.alive

    def close(self):
        """Frees the memory now; a second call does nothing. BufferError, freeing nothing,
        while a view of the buffer exists (see the class's Lifetime)."""
        self._close_exporter()
        self._finalizer()

    def __enter__(self):
        self._check_open("__enter__")
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return self._size

    def __getitem__(self, index):
        """buf[i] an int, buf[i:j] a bytes copy (ValueError once closed)."""
        self._check_open("__getitem__")
        with memoryview(self) as view:
            item = view[index]
            if isinstance(item, memoryview):
                with item:
                    return item.tobytes()
            return item

    def __setitem__(self, index, value):
        self._check_open("__setitem__")
        with memoryview(self) as view:
            view[index] = value

    @property
    def address(self):
        """The memory's address (an int)."""
        self._check_open("address")
        return self._address

    @property
    def size(self):
        """The size asked for, in bytes (len(buf) too)."""
        return self._size

    @property
    def arena(self):
        """The Arena the memory came from."""
        return self._arena

    @property
    def usable_size(self):
        """Usable bytes at the address (at least `size`)."""
        self._check_open("usable_size")
        return _lib.numarena_usable_size(self._address)

    @property
    def node(self):
        """The node the arena places pages on, NODE_MIXED for interleaved/multi-node
        arenas (the placement asked for; page_nodes() says where pages are)."""
        self._check_open("node")
        return _lib.numarena_node_of(self._address)

    def page_nodes(self):
        """page_nodes() of the whole buffer."""
        self._check_open("page_nodes")
        return page_nodes(self._address, self._size)

    def prefault(self, node=None):
        """prefault() of the whole buffer, to `node` (default: the arena's node; an
        interleaved buffer needs a node)."""
        return prefault(self._address_for("prefault"), self._target(node), self._size)

    def correct(self, node=None):
        """correct() of the whole buffer, to `node` (default as prefault)."""
        return correct(self._address_for("correct"), self._target(node), self._size)

    def _address_for(self, what):
        self._check_open(what)
        return self._address

    def _target(self, node):
        if node is not None:
            return node
        own = _lib.numarena_node_of(self._address)
        if own < 0:
            raise ValueError("numarena.NodeBuffer: the buffer is not on one node "
                             f"({self._arena.policy}); say which node")
        return own

    def __repr__(self):
        if self.closed:
            return f"<numarena.NodeBuffer {self._size} bytes, closed>"
        return (f"<numarena.NodeBuffer {self._size} bytes at {self._address:#x}, "
                f"{self._arena.policy}>")

    def __reduce__(self):
        raise TypeError("numarena.NodeBuffer cannot be pickled (copy its bytes instead)")


# ---- the budget -------------------------------------------------------------------------------

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
    OK = 0     # start the work now
    LATER = 1  # the node is too full now; retry when memory was freed
    NEVER = 2  # more than the node could ever give this priority


@dataclass(frozen=True)
class BudgetNode:
    """One node of a budget snapshot (bytes). numarena_bytes: charged by numarena's
    allocations; refusals: charges refused."""
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


_installed: Optional["Budget"] = None
_installed_lock = threading.Lock()


class Budget:
    """A per-node memory budget over the online nodes: warn at 80 %, admission closes at
    85 %, trip at 90 %.

    spec "system": capacity = the node's memory, usage = what the kernel says is used.
    spec "quota:SIZE" (e.g. "quota:8G"): each node may hold SIZE bytes of numarena memory.
    InvalidArgumentError for another spec.

    install() makes it the process-wide gate every arena charges before it commits memory
    (a full node then gives ResourceExhaustedError / MemoryError instead of an OOM kill).
    An installed budget stays alive (the module keeps it) until uninstall(). close()
    destroys it (FailedPreconditionError while installed); it is also destroyed when
    collected. Usable as a context manager: install on entry, uninstall and close on exit."""

    def __init__(self, spec="system"):
        if not isinstance(spec, str):
            raise TypeError(f"numarena.Budget: spec must be a str, not {type(spec).__name__}")
        if "\0" in spec:
            raise InvalidArgumentError(_capi.INVALID_ARGUMENT,
                                       f"numarena.Budget: the spec {spec!r} has a NUL byte")
        handle = _lib.numarena_budget_create(spec.encode())
        if not handle:
            raise _capi.last_error()
        self._handle = handle
        self.spec = spec
        self._finalizer = weakref.finalize(self, _lib.numarena_budget_destroy, handle)
        self._finalizer.atexit = False

    def _check_open(self, what):
        if not self._finalizer.alive:
            raise ValueError(f"numarena.Budget.{what}: the budget is closed")
        return self._handle

    @property
    def closed(self):
        return not self._finalizer.alive

    @property
    def installed(self):
        """True while this budget is the process's gate (installed through this module)."""
        return _installed is self

    def install(self):
        """Installs it. FailedPreconditionError when another budget is installed."""
        global _installed
        handle = self._check_open("install")
        with _installed_lock:
            _capi.check(_lib.numarena_budget_install(handle))
            _installed = self

    def uninstall(self):
        """Uninstalls it; FailedPreconditionError when it is not the installed budget."""
        global _installed
        self._check_open("uninstall")
        with _installed_lock:
            if _installed is not self:
                raise FailedPreconditionError(
                    _capi.FAILED_PRECONDITION,
                    "numarena.Budget.uninstall: this budget is not installed")
            _capi.check(_lib.numarena_budget_install(None))
            _installed = None

    def close(self):
        """Destroys the budget (a second call does nothing). FailedPreconditionError while
        it is installed: uninstall() first."""
        if not self._finalizer.alive:
            return
        if _installed is self:
            raise FailedPreconditionError(
                _capi.FAILED_PRECONDITION,
                "numarena.Budget.close: the budget is installed; call uninstall() first")
        code = self._finalizer()
        _capi.check(code)

    def snapshot(self):
        """One BudgetNode per node, ascending ids."""
        handle = self._check_open("snapshot")
        count = ctypes.c_size_t(0)
        while True:
            entries = (_capi.BudgetNode * max(count.value, 1))()
            code = _lib.numarena_budget_snapshot(handle, entries, len(entries),
                                                 ctypes.byref(count))
            if code == _capi.OK:
                break
            if code != _capi.OUT_OF_RANGE:
                raise _capi.last_error()
        return [BudgetNode(e.node, NodeState(e.state), e.capacity, e.usage, e.peak,
                           e.warn_bytes, e.admission_bytes, e.trip_bytes, e.numarena_bytes,
                           e.refusals) for e in list(entries)[:count.value]]

    def admit(self, node, nbytes, priority=Priority.NORMAL):
        """Should work needing about `nbytes` on `node` start now? Charges nothing. Returns
        an Admission. InvalidArgumentError for a node the budget does not know or a
        priority that is not a Priority."""
        handle = self._check_open("admit")
        _check_c_int(node, "node")
        _check_size(nbytes, "nbytes")
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise TypeError("numarena.Budget.admit: priority must be a numarena.Priority")
        _check_c_int(int(priority), "priority")
        answer = ctypes.c_int(-1)
        _capi.check(_lib.numarena_budget_admit(handle, node, nbytes, int(priority),
                                               ctypes.byref(answer)))
        return Admission(answer.value)

    def __enter__(self):
        self.install()
        return self

    def __exit__(self, *exc):
        if self.installed:
            self.uninstall()
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else ("installed" if self.installed else "open")
        return f"<numarena.Budget {self.spec!r}, {state}>"


# ---- metrics ------------------------------------------------------------------------------------

def metrics_text(arenas=None, budget=None):
    """One Prometheus scrape (text format 0.0.4) of numarena's figures: the kernel's per-node
    counters and memory, this process's memory per node, the arenas' statistics and the
    budget's (numarena_metrics_text). `arenas`: the Arenas to report (default: every arena
    this module has used); `budget`: a Budget (default: the one installed through this
    module, if any). NotFoundError / SystemNumarenaError when kernel files cannot be read;
    UnimplementedError when the library predates numarena_metrics_text."""
    if not _capi.has_metrics:
        raise UnimplementedError(_capi.UNIMPLEMENTED,
                                 f"numarena.metrics_text: {library_path} has no "
                                 "numarena_metrics_text (an older libnumarena.so)")
    if arenas is None:
        with Arena._known_lock:
            arenas = list(Arena._known.values())
    arenas = list(arenas)
    for arena in arenas:
        if not isinstance(arena, Arena):
            raise TypeError(f"numarena.metrics_text: {type(arena).__name__} is not an Arena")
    if budget is None:
        budget = _installed
    elif not isinstance(budget, Budget):
        raise TypeError(f"numarena.metrics_text: budget must be a Budget, not "
                        f"{type(budget).__name__}")
    handles = (ctypes.c_void_p * max(len(arenas), 1))(*[a._handle for a in arenas])
    budget_handle = budget._check_open("metrics_text") if budget is not None else None
    length, text = _capi.read_text(
        lambda b, n: _lib.numarena_metrics_text(handles, len(arenas), budget_handle, b, n),
        1 << 16)
    if length == 0:
        raise _capi.last_error()
    return text


# The KV-cache pool (numarena/kv.py); at the end: it imports this package's names.
from .kv import BlockLocation, KvPool  # noqa: E402
