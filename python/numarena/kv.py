"""numarena.KvPool: the KV-cache pool (numarena::KvPool) from Python, over libnumarena.so's C
API (numarena.h, "the KV-cache pool"). Attention K/V blocks are placed by head group on home
nodes, demoted to a cold tier and promoted back; sequences and blocks are int handles. The
block memory is reached as torch tensors through numarena.torch.kv_block_tensors (no copy).

    pool = numarena.KvPool(layers=2, kv_heads=4, head_dim=64, dtype="fp16",
                           cold_tier="farthest")
    seq, reused = pool.create_sequence(prompt_token_ids)
    for block in pool.blocks(seq, layer=0, group=0): ...
    pool.free_sequence(seq)
    pool.close()         # or `with numarena.KvPool(...) as pool:`

Lifetime: close() gives up this object's hold on the pool; tensors viewing its blocks keep it
(and their blocks' memory) alive until they are gone, so a view never outlives its memory.
"""
import ctypes
from dataclasses import dataclass
from typing import Optional, Sequence

from . import _capi
from ._capi import FailedPreconditionError, InvalidArgumentError

_lib = _capi.lib
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_int = ctypes.c_int
_u64 = ctypes.c_uint64

DTYPES = {"fp32": 0, "fp16": 1, "bf16": 2, "fp8": 3}
_DTYPE_NAMES = {code: name for name, code in DTYPES.items()}
TIERS = {0: "none", 1: "hot", 2: "cold"}


class PoolOptions(ctypes.Structure):  # numarena_kv_pool_options
    _fields_ = [("size", _sz), ("layers", _int), ("kv_heads", _int), ("head_dim", _int),
                ("dtype", _int), ("tokens_per_block", _int), ("layers_per_block", _int),
                ("heads_per_group", _int), ("home_nodes", ctypes.POINTER(_int)),
                ("home_node_count", _sz), ("cold_tier", ctypes.c_char_p),
                ("hot_blocks_per_node", _sz), ("cold_blocks", _sz),
                ("no_promote_on_touch", _int)]


class PoolLayout(ctypes.Structure):  # numarena_kv_pool_layout
    _fields_ = [("head_groups", _int), ("heads_per_group", _int), ("layer_ranges", _int),
                ("layers_per_block", _int), ("tokens_per_block", _int), ("head_dim", _int),
                ("dtype", _int), ("block_bytes", _sz)]


class AuditReport(ctypes.Structure):  # numarena_kv_audit_report
    _fields_ = [("blocks_checked", _sz), ("pages_checked", _sz), ("hot_blocks_misplaced", _sz),
                ("cold_blocks_misplaced", _sz), ("hot_pages_misplaced", _sz),
                ("cold_pages_misplaced", _sz), ("pages_moved_back", _sz),
                ("pages_not_moved", _sz), ("blocks_left", _sz), ("wrapped", _int)]


available = hasattr(_lib, "numarena_kv_pool_create")
"""False with a libnumarena.so older than the KV C API (KvPool() then says so)."""
if available:
    for _name, _restype, _argtypes in [
            ("numarena_kv_pool_create", _vp, [ctypes.POINTER(PoolOptions)]),
            ("numarena_kv_pool_destroy", None, [_vp]),
            ("numarena_kv_pool_layout_of", _int, [_vp, ctypes.POINTER(PoolLayout),
                                                  ctypes.POINTER(_int), _sz]),
            ("numarena_kv_sequence_create", _int, [_vp, ctypes.POINTER(ctypes.c_int32), _sz,
                                                   ctypes.POINTER(_u64), ctypes.POINTER(_sz)]),
            ("numarena_kv_sequence_append", _int, [_vp, _u64, ctypes.POINTER(ctypes.c_int32),
                                                   _sz]),
            ("numarena_kv_sequence_mark_computed", _int, [_vp, _u64, _sz]),
            ("numarena_kv_sequence_free", _int, [_vp, _u64]),
            ("numarena_kv_blocks", _int, [_vp, _u64, _int, _int, ctypes.POINTER(_u64), _sz,
                                          ctypes.POINTER(_sz)]),
            ("numarena_kv_locate", _int, [_vp, _u64, ctypes.POINTER(_int),
                                          ctypes.POINTER(_int), ctypes.POINTER(_int)]),
            ("numarena_kv_demote_block", _int, [_vp, _u64]),
            ("numarena_kv_promote_block", _int, [_vp, _u64]),
            ("numarena_kv_demote", _sz, [_vp, _int, _sz]),
            ("numarena_kv_audit", _int, [_vp, _int, _sz, _sz, ctypes.POINTER(AuditReport)])]:
        _function = getattr(_lib, _name)
        _function.restype = _restype
        _function.argtypes = _argtypes


def _int_arg(value, what, minimum=None):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"numarena.KvPool: {what} must be an int, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(_capi.INVALID_ARGUMENT,
                                   f"numarena.KvPool: {what} {value} is below {minimum}")
    if not -(1 << 63) <= value < 1 << 64:
        raise InvalidArgumentError(_capi.INVALID_ARGUMENT,
                                   f"numarena.KvPool: {what} {value} is out of range")
    return value


def _tokens(tokens):
    values = list(tokens)
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool) or not (
                -(1 << 31) <= value < 1 << 31):
            raise TypeError(f"numarena.KvPool: token ids must be 32-bit ints, not {value!r}")
    return (ctypes.c_int32 * max(len(values), 1))(*values), len(values)


@dataclass(frozen=True)
class BlockLocation:
    """Where a block is now: tier "hot", "cold" or "none", its node, and its pins."""
    tier: str
    node: int
    pins: int


class KvPool:
    """A KV-cache pool. Geometry: layers, kv_heads, head_dim, dtype ("fp32", "fp16", "bf16",
    "fp8"), tokens_per_block (default 16), layers_per_block (1), heads_per_group (0: kv_heads
    / home nodes when that divides, else 1). home_nodes: the head groups' nodes (default: the
    nodes with CPUs). cold_tier: None, "node:N", "farthest", "interleave:0,2",
    "target:capacity" (or bandwidth, latency). hot_blocks_per_node / cold_blocks: limits in
    blocks (0: only the memory's). promote_on_touch: pinning a cold block brings it back hot
    when there is room. Block memory is bound to its node and charged to the installed
    numarena.Budget, if any. InvalidArgumentError names a bad geometry, node or tier."""

    def __init__(self, *, layers, kv_heads, head_dim, dtype="fp16", tokens_per_block=16,
                 layers_per_block=1, heads_per_group=0, home_nodes: Sequence[int] = (),
                 cold_tier: Optional[str] = None, hot_blocks_per_node=0, cold_blocks=0,
                 promote_on_touch=True):
        if not available:
            raise _capi.UnimplementedError(
                _capi.UNIMPLEMENTED, f"numarena.KvPool: {_capi.library_path} has no KV-pool C "
                "API (numarena_kv_pool_create); use a newer libnumarena.so")
        if dtype not in DTYPES:
            raise InvalidArgumentError(_capi.INVALID_ARGUMENT,
                                       f"numarena.KvPool: dtype {dtype!r} is not one of "
                                       f"{sorted(DTYPES)}")
        if cold_tier is not None and not isinstance(cold_tier, str):
            raise TypeError("numarena.KvPool: cold_tier must be a str or None, not "
                            f"{type(cold_tier).__name__}")
        homes = [_int_arg(n, "home node") for n in home_nodes]
        home_array = (_int * max(len(homes), 1))(*homes)
        options = PoolOptions(
            ctypes.sizeof(PoolOptions), _int_arg(layers, "layers"),
            _int_arg(kv_heads, "kv_heads"), _int_arg(head_dim, "head_dim"), DTYPES[dtype],
            _int_arg(tokens_per_block, "tokens_per_block"),
            _int_arg(layers_per_block, "layers_per_block"),
            _int_arg(heads_per_group, "heads_per_group"), home_array, len(homes),
            cold_tier.encode() if cold_tier else None,
            _int_arg(hot_blocks_per_node, "hot_blocks_per_node", 0),
            _int_arg(cold_blocks, "cold_blocks", 0), 0 if promote_on_touch else 1)
        handle = _lib.numarena_kv_pool_create(ctypes.byref(options))
        if not handle:
            raise _capi.last_error()
        self._handle = handle
        layout = PoolLayout()
        nodes = (_int * 4096)()
        _capi.check(_lib.numarena_kv_pool_layout_of(handle, ctypes.byref(layout), nodes,
                                                    len(nodes)))
        self.layers = layers
        self.kv_heads = kv_heads
        self.head_dim = layout.head_dim
        self.dtype = _DTYPE_NAMES[layout.dtype]
        self.tokens_per_block = layout.tokens_per_block
        self.layers_per_block = layout.layers_per_block
        self.head_groups = layout.head_groups
        self.heads_per_group = layout.heads_per_group
        self.block_bytes = layout.block_bytes
        self.group_nodes = [nodes[g] for g in range(layout.head_groups)]
        """The home node of each head group."""

    def _live(self, what):
        if self._handle is None:
            raise FailedPreconditionError(_capi.FAILED_PRECONDITION,
                                          f"numarena.KvPool.{what}: the pool is closed")
        return self._handle

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Gives up this object's hold on the pool (numarena_kv_pool_destroy): the pool goes
        now, or when the last tensor viewing one of its blocks is gone. Idempotent."""
        if self._handle is not None:
            _lib.numarena_kv_pool_destroy(self._handle)
            self._handle = None

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def create_sequence(self, tokens=()):
        """A new sequence holding `tokens` (prompt ids). Returns (sequence, reused): reused
        leading tokens already have K/V (shared cached prefix spans). ResourceExhaustedError
        when no memory is left."""
        array, count = _tokens(tokens)
        sequence, reused = _u64(), _sz()
        _capi.check(_lib.numarena_kv_sequence_create(self._live("create_sequence"), array,
                                                     count, ctypes.byref(sequence),
                                                     ctypes.byref(reused)))
        return sequence.value, reused.value

    def append(self, sequence, tokens):
        """Appends token ids (write their K/V afterwards)."""
        array, count = _tokens(tokens)
        _capi.check(_lib.numarena_kv_sequence_append(self._live("append"),
                                                     _int_arg(sequence, "sequence", 0), array,
                                                     count))

    def mark_computed(self, sequence, tokens):
        """Declares the first `tokens` tokens' K/V written and final (prefix reuse)."""
        _capi.check(_lib.numarena_kv_sequence_mark_computed(
            self._live("mark_computed"), _int_arg(sequence, "sequence", 0),
            _int_arg(tokens, "tokens", 0)))

    def free_sequence(self, sequence):
        """Releases the sequence; its spans become cached or free."""
        _capi.check(_lib.numarena_kv_sequence_free(self._live("free_sequence"),
                                                   _int_arg(sequence, "sequence", 0)))

    def blocks(self, sequence, layer, group):
        """The block ids of `sequence` for (layer, group), in token order."""
        handle = self._live("blocks")
        count = _sz()
        capacity = 64
        while True:
            ids = (_u64 * capacity)()
            code = _lib.numarena_kv_blocks(handle, _int_arg(sequence, "sequence", 0),
                                           _int_arg(layer, "layer"), _int_arg(group, "group"),
                                           ids, capacity, ctypes.byref(count))
            if code == _capi.OK:
                return list(ids[:count.value])
            if code != _capi.OUT_OF_RANGE:
                raise _capi.last_error()
            capacity = count.value

    def locate(self, block):
        """Where a block is now (BlockLocation), without pinning it."""
        tier, node, pins = _int(), _int(), _int()
        _capi.check(_lib.numarena_kv_locate(self._live("locate"), _int_arg(block, "block", 0),
                                            ctypes.byref(tier), ctypes.byref(node),
                                            ctypes.byref(pins)))
        return BlockLocation(TIERS.get(tier.value, "none"), node.value, pins.value)

    def demote_block(self, block):
        """Moves a block to the cold tier now. FailedPreconditionError while it is pinned
        (a tensor views it), unused, already cold, or without a cold tier."""
        _capi.check(_lib.numarena_kv_demote_block(self._live("demote_block"),
                                                  _int_arg(block, "block", 0)))

    def promote_block(self, block):
        """Moves a cold block back to its home node now (errors as demote_block)."""
        _capi.check(_lib.numarena_kv_promote_block(self._live("promote_block"),
                                                   _int_arg(block, "block", 0)))

    def demote(self, node, max_blocks):
        """Demotes up to `max_blocks` unpinned hot blocks of `node`; returns how many."""
        return _lib.numarena_kv_demote(self._live("demote"), _int_arg(node, "node"),
                                       _int_arg(max_blocks, "max_blocks", 0))

    def audit(self, correct=False, max_blocks=1024, max_corrected_blocks=64):
        """Asks the kernel where the pages of the next `max_blocks` blocks holding data are
        (KvPool::AuditPlacement). Pages the kernel's tiering moved off their block's node are
        counted and, with `correct`, moved back for at most `max_corrected_blocks` blocks.
        Returns a dict: blocks_checked, pages_checked, hot/cold_blocks_misplaced,
        hot/cold_pages_misplaced ("hot": demoted by the kernel, "cold": promoted),
        pages_moved_back, pages_not_moved, blocks_left, wrapped (a pass over every block
        ended). InvalidArgumentError for max_blocks 0."""
        report = AuditReport()
        _capi.check(_lib.numarena_kv_audit(
            self._live("audit"), 1 if correct else 0, _int_arg(max_blocks, "max_blocks", 0),
            _int_arg(max_corrected_blocks, "max_corrected_blocks", 0), ctypes.byref(report)))
        return {name: (bool(getattr(report, name)) if name == "wrapped" else
                       getattr(report, name)) for name, _ in AuditReport._fields_}

    def __repr__(self):
        state = "closed" if self.closed else f"groups on {self.group_nodes}"
        return (f"<numarena.KvPool {self.layers}x{self.kv_heads}x{self.head_dim} {self.dtype}, "
                f"{self.tokens_per_block} tokens/block, {state}>")
