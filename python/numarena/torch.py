"""numarena.torch: PyTorch CPU tensors placed by numarena, without LD_PRELOAD.

Every CPU tensor's storage comes from libtorch's one process-wide CPU allocator. Importing
this module loads libnumarena_torch.so (numarena::torch, include/numarena/torch.hpp), whose
allocator takes that place (c10::SetCPUAllocator) the first time it is needed and keeps
libtorch's own allocator behind it. Which memory a new tensor gets is decided on the thread
that allocates it:

    with numarena.torch.on("bind(1)"):          # this thread's tensors: node 1
        weights = torch.randn(4096, 4096)
    numarena.torch.use("interleave(0,1)")       # every thread, outside `on` blocks
    numarena.torch.use(None)                    # back to libtorch's allocator
    print(numarena.torch.tensor_nodes(weights).pages_on_node)   # {1: 16384}

A policy is a policy string (numarena's syntax: "bind(1)", "interleave(0-3)",
"preferred(2)", "weighted(0:3,1:1)", "local", "target(bandwidth)", ...), a shared
numarena.Arena (Arena.for_node / Arena.for_policy), or None for libtorch's own allocator.
Tensors are freed by numarena on whatever thread drops them, after their `on` block too.

Out of memory: when numarena refuses a tensor (its node is full, or an installed
numarena.Budget refuses), PyTorch raises its own out-of-memory error,
torch.cuda.OutOfMemoryError (a RuntimeError; the name is PyTorch's for every device), with
numarena's reason in the message; nothing was committed and the process carries on.

Why ctypes and not a compiled extension: the allocator lives in libnumarena_torch.so, a
small C++ library linked against libc10 and libnumarena.so only, and this module calls its
C functions. It builds with the project (no Python headers or torch extension toolchain
matching the installed torch), it uses the same libnumarena.so as the `numarena` module (one
numarena, one budget, numarena.owns() sees the tensors), and a C++ extension that links
numarena::torch's shared library in the same process shares its one allocator.

The library is found at NUMARENA_TORCH_LIBRARY (a path) when set, else next to the loaded
libnumarena.so, else next to this file, else by the dynamic loader.
"""
import ctypes
import os

import torch as _torch

from . import Arena, InvalidArgumentError, KvPool, PageNodes, PlacementReport, _capi
from . import correct as _correct_range
from . import page_nodes as _page_nodes
from . import owns as _owns_address

__all__ = ["correct", "current", "install", "kv_block_tensors", "kv_write", "library_path", "on",
           "owns", "tensor_nodes", "use"]

_SONAME = "libnumarena_torch.so.0"


def _candidates():
    explicit = os.environ.get("NUMARENA_TORCH_LIBRARY")
    if explicit:
        return [explicit], True
    paths = []
    if os.sep in _capi.library_path:
        beside = os.path.dirname(os.path.realpath(_capi.library_path))
        paths.append(os.path.join(beside, _SONAME))
    paths.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), _SONAME))
    return paths + [_SONAME], False


def _load():
    paths, explicit = _candidates()
    loaded, found = _capi.load_first(paths)
    if loaded is not None:
        return loaded, found
    where = ("NUMARENA_TORCH_LIBRARY=" + paths[0]) if explicit else (
        "beside libnumarena.so, the package directory, then the dynamic loader's search path")
    raise ImportError(
        f"numarena.torch: cannot load libnumarena_torch.so (looked in {where}): " +
        found + ". It is built when libtorch is found (apt-get install "
        "libtorch-dev; cmake --build build --target numarena_torch_shared); or set "
        "NUMARENA_TORCH_LIBRARY to its path.")


_lib, library_path = _load()
"""The path (or soname) libnumarena_torch.so was loaded from."""

_vp = ctypes.c_void_p
for _name, _restype, _argtypes in [
        ("numarena_torch_install", None, []),
        ("numarena_torch_installed", ctypes.c_int, []),
        ("numarena_torch_use", None, [_vp]),
        ("numarena_torch_used", _vp, []),
        ("numarena_torch_current_arena", _vp, []),
        ("numarena_torch_scope_enter", _vp, [_vp]),
        ("numarena_torch_scope_exit", ctypes.c_int, [_vp]),
        ("numarena_torch_kv_block_dlpack", _vp, [_vp, ctypes.c_uint64, ctypes.c_int,
                                                 ctypes.c_int]),
        ("numarena_torch_dlpack_delete", None, [_vp])]:
    _function = getattr(_lib, _name)
    _function.restype = _restype
    _function.argtypes = _argtypes


def _arena_handle(policy, what):
    """The C handle for `policy` (None: libtorch's allocator, handle None)."""
    if policy is None:
        return None
    if isinstance(policy, str):
        return Arena.for_policy(policy)._handle
    if isinstance(policy, Arena):
        if policy.destroyed or policy._owned:
            raise InvalidArgumentError(
                _capi.INVALID_ARGUMENT,
                f"numarena.torch.{what}: the arena {policy.policy} was made by Arena.create "
                "and can be destroyed while tensors still live in it; use a shared arena "
                "(Arena.for_node / Arena.for_policy) or a policy string")
        return policy._handle
    raise TypeError(f"numarena.torch.{what}: the policy must be a policy string, a "
                    f"numarena.Arena or None, not {type(policy).__name__}")


def _arena_of(handle):
    return Arena._from_handle(handle) if handle else None


def install():
    """Makes numarena's allocator libtorch's CPU allocator now (use() and on() do it when
    first called). Tensors made so far keep their memory; new ones still go to libtorch's
    allocator until use() or on() says otherwise."""
    _lib.numarena_torch_install()


def use(policy):
    """Sends the CPU tensors allocated from now on, by every thread outside an on() block,
    to `policy` (see the module's documentation; None: libtorch's own allocator)."""
    _lib.numarena_torch_use(_arena_handle(policy, "use"))


def current():
    """The numarena.Arena this thread's new tensors go to now (its innermost on() block, else
    use()'s), or None when they go to libtorch's allocator."""
    return _arena_of(_lib.numarena_torch_current_arena())


class on:
    """`with numarena.torch.on(policy):` sends the CPU tensors this thread allocates inside
    the block to `policy` (None: libtorch's allocator). Blocks nest; the innermost wins;
    other threads are not affected. The tensors live on after the block, where they are.
    The policy is checked when the object is made (InvalidArgumentError for a malformed
    string or an unknown node, TypeError for another type). One use per object; it must be
    left on the thread that entered it (RuntimeError otherwise)."""

    def __init__(self, policy):
        self._handle = _arena_handle(policy, "on")
        self._scope = None
        self._used = False

    def __enter__(self):
        if self._used:
            raise RuntimeError("numarena.torch.on: this block was already entered; make a new "
                               "on(policy) for each with statement")
        self._used = True
        scope = _lib.numarena_torch_scope_enter(self._handle)
        if not scope:
            raise MemoryError("numarena.torch.on: no memory for the scope")
        self._scope = scope
        return _arena_of(self._handle)

    def __exit__(self, *exc):
        if _lib.numarena_torch_scope_exit(self._scope) != _capi.OK:
            raise RuntimeError(
                "numarena.torch.on: the block is left on another thread than the one that "
                "entered it, or while a block entered after it is still open; leave blocks "
                "innermost first, on their own thread")
        self._scope = None
        return False


def _cpu_tensor(tensor, what):
    if not isinstance(tensor, _torch.Tensor):
        raise TypeError(f"numarena.torch.{what}: expected a torch.Tensor, not "
                        f"{type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"numarena.torch.{what}: the tensor is on {tensor.device}, not the "
                         "CPU; numarena places host memory (move it with .cpu() first)")
    if tensor.layout != _torch.strided:
        raise ValueError(f"numarena.torch.{what}: the tensor's layout is {tensor.layout}; only "
                         "dense (torch.strided) tensors have one block of memory")
    if tensor.is_quantized:
        raise ValueError(f"numarena.torch.{what}: quantized tensors ({tensor.dtype}) are not "
                         "supported; dequantize first")
    return tensor


def _byte_span(tensor):
    """(address, length) of the bytes `tensor` reads: from its first element to its last."""
    if tensor.numel() == 0:
        return tensor.data_ptr(), 0
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr(), (last + 1) * tensor.element_size()


def owns(tensor):
    """True when numarena allocated `tensor`'s memory (numarena.owns on its data pointer);
    False for a tensor with no elements (it has no memory)."""
    address, length = _byte_span(_cpu_tensor(tensor, "owns"))
    return length > 0 and _owns_address(address)


def tensor_nodes(tensor):
    """Where the pages of `tensor`'s elements are (numarena.page_nodes over them; no page is
    faulted in or moved): a numarena.PageNodes whose pages_on_node maps node -> pages. Any
    dense CPU tensor, numarena's or not. TypeError for a non-tensor, ValueError for a tensor
    that is not on the CPU, sparse or quantized."""
    address, length = _byte_span(_cpu_tensor(tensor, "tensor_nodes"))
    if length == 0:
        return PageNodes({}, 0, 0, 0)
    return _page_nodes(address, length)


def correct(tensor, node):
    """Migrates the resident pages of `tensor`'s elements that are not on `node` to it
    (numarena.correct; never faults a page in). Returns a numarena.PlacementReport. Errors:
    as tensor_nodes, and InvalidArgumentError for a node that is not online, TypeError for a
    node that is not an int. Moving pages does not change which arena the tensor's memory
    belongs to: a later tensor from that arena is still placed by its policy."""
    address, length = _byte_span(_cpu_tensor(tensor, "correct"))
    if length == 0:
        if not isinstance(node, int) or isinstance(node, bool):
            raise TypeError(f"numarena: node must be an int, not {type(node).__name__}")
        return PlacementReport(node, 0, 0, 0, 0, 0)
    return _correct_range(address, node, length)


def _installed():
    return bool(_lib.numarena_torch_installed())



# ---- KV-pool blocks as tensors --------------------------------------------------------------

_KV_TORCH_DTYPES = {"fp32": _torch.float32, "fp16": _torch.float16, "bf16": _torch.bfloat16,
                    "fp8": _torch.uint8}
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [_vp, ctypes.c_char_p, _vp]
_DLTENSOR = b"dltensor"  # the capsule keeps a pointer to this name: module-lifetime bytes


def _kv_pool(pool, what):
    if not isinstance(pool, KvPool):
        raise TypeError(f"numarena.torch.{what}: expected a numarena.KvPool, not "
                        f"{type(pool).__name__}")
    return pool._live(what)


def kv_block_tensors(pool, block, layer_in_block=0):
    """The K and V rows of layer `layer_in_block` of a KV-pool block as two torch tensors,
    without a copy: shape [tokens_per_block, heads_per_group, head_dim], the pool's dtype
    (fp32, fp16, bf16; fp8 as torch.uint8), strided (the pool stores each head's rows
    together; .contiguous() makes a packed copy).

    The tensors pin the block until both, and every tensor made from them (slices, views), are
    gone: a pinned block never moves, so KvPool.demote_block refuses it
    (FailedPreconditionError) and demote() skips it. Afterwards the block may be demoted and
    promoted; new views read the same data. A view kept after its sequence is freed keeps the
    memory but not the contents (the span's next owner writes there). The views keep the pool
    alive after KvPool.close().

    Errors: TypeError (pool not a KvPool, block not an int), FailedPreconditionError (a
    closed pool, or a stale or unused block id), InvalidArgumentError (layer_in_block outside
    0 .. layers_per_block - 1)."""
    handle = _kv_pool(pool, "kv_block_tensors")
    if not isinstance(block, int) or isinstance(block, bool):
        raise TypeError(f"numarena.torch.kv_block_tensors: block must be an int id, not "
                        f"{type(block).__name__}")
    if not isinstance(layer_in_block, int) or not 0 <= layer_in_block < pool.layers_per_block:
        raise InvalidArgumentError(
            _capi.INVALID_ARGUMENT,
            f"numarena.torch.kv_block_tensors: layer_in_block {layer_in_block!r} is outside "
            f"0 .. {pool.layers_per_block - 1} (model layer L is L % layers_per_block)")
    if not 0 <= block < 1 << 64:
        raise InvalidArgumentError(_capi.INVALID_ARGUMENT,
                                   f"numarena.torch.kv_block_tensors: block {block} is not an id")
    views = []
    for value in (0, 1):
        _capi.lib.numarena_clear_error()
        managed = _lib.numarena_torch_kv_block_dlpack(handle, block, layer_in_block, value)
        if not managed:
            raise _capi.last_error()
        try:
            capsule = _capsule_new(managed, _DLTENSOR, None)
            views.append(_torch.utils.dlpack.from_dlpack(capsule))
        except BaseException:
            _lib.numarena_torch_dlpack_delete(managed)  # never handed to a tensor
            raise
    return views[0], views[1]


def kv_write(pool, sequence, layer, token, key, value):
    """Writes one token's K and V rows of one layer, all KV heads, into the pool: `key` and
    `value` are CPU tensors of shape [kv_heads, head_dim] and exactly the pool's dtype (fp8:
    torch.uint8). Each head group's rows go to its block (on its home node). Errors: as
    kv_block_tensors; TypeError for a wrong dtype (convert with .to(...)), ValueError for a
    wrong shape or a tensor not on the CPU, IndexError for a token the sequence does not
    hold (append it first)."""
    _kv_pool(pool, "kv_write")
    expected = _KV_TORCH_DTYPES[pool.dtype]
    for name, tensor in (("key", key), ("value", value)):
        _cpu_tensor(tensor, "kv_write")
        if tensor.dtype != expected:
            raise TypeError(f"numarena.torch.kv_write: {name} has dtype {tensor.dtype}, the "
                            f"pool holds {pool.dtype} ({expected}); convert with "
                            f"{name}.to({expected})")
        if tuple(tensor.shape) != (pool.kv_heads, pool.head_dim):
            raise ValueError(f"numarena.torch.kv_write: {name} has shape {tuple(tensor.shape)}, "
                             f"not [kv_heads, head_dim] = [{pool.kv_heads}, {pool.head_dim}]")
    if not isinstance(token, int) or isinstance(token, bool) or token < 0:
        raise TypeError(f"numarena.torch.kv_write: token must be an int >= 0, not {token!r}")
    index, row = divmod(token, pool.tokens_per_block)
    for group in range(pool.head_groups):
        blocks = pool.blocks(sequence, layer, group)
        if index >= len(blocks):
            raise IndexError(f"numarena.torch.kv_write: token {token} is past the sequence's "
                             f"{len(blocks) * pool.tokens_per_block} token slots; append it "
                             "first (KvPool.append)")
        k, v = kv_block_tensors(pool, blocks[index], layer % pool.layers_per_block)
        heads = slice(group * pool.heads_per_group, (group + 1) * pool.heads_per_group)
        k[row].copy_(key[heads])
        v[row].copy_(value[heads])
