"""libnumarena.so through ctypes: finding the library, the C API's prototypes and structs
(include/numarena/numarena.h), and numarena_code -> Python exception.

Private: the public API is the `numarena` package. Everything here follows numarena.h one to
one; a change there must be mirrored here (tests/python/ exercises every function).
"""
import ctypes
import os
import sys

# ---- finding the library -----------------------------------------------------------------

_SONAME = "libnumarena.so.0"


def _candidates():
    """Where to look, in order: NUMARENA_LIBRARY (a path, used alone when set); the package's
    own directory (a library copied next to __init__.py), and for a package installed by
    `cmake --install` the library installed with it (_install.py, written at install time,
    holds its path relative to the package); then the dynamic loader's search
    (LD_LIBRARY_PATH, the ld.so cache, the default directories)."""
    explicit = os.environ.get("NUMARENA_LIBRARY")
    if explicit:
        return [explicit], True
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, _SONAME), os.path.join(here, "libnumarena.so")]
    try:
        from . import _install
        paths.append(os.path.normpath(os.path.join(here, _install.LIBRARY)))
    except ImportError:  # the source tree: no install step ran
        pass
    return paths + [_SONAME, "libnumarena.so"], False


def load_first(paths):
    """The first of `paths` that loads (ctypes.CDLL), as (library, path); or (None, the
    reasons the others did not). A path with a directory that does not exist is skipped."""
    errors = []
    for path in paths:
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as error:
            errors.append(str(error))
    return None, "; ".join(errors)


def _load():
    paths, explicit = _candidates()
    loaded, found = load_first(paths)
    if loaded is not None:
        return loaded, found
    where = ("NUMARENA_LIBRARY=" + paths[0]) if explicit else (
        "the package directory, the installed library, then the dynamic loader's search "
        "path")
    raise ImportError(
        f"numarena: cannot load libnumarena.so (looked in {where}): " + found +
        ". Build it (cmake --build build --target numarena_shared) or install numarena "
        "(cmake --install build), or set NUMARENA_LIBRARY to the library's path.")


lib, library_path = _load()


def _mapped_path(soname):
    """Where the dynamic loader found `soname` (the file this process mapped), or None."""
    stem = soname.split(".so")[0] + ".so"
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)  # anonymous mappings have no sixth, the path
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith(stem):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def _load_buffer_module():
    """numarena._buffer, the compiled exporter behind NodeBuffer (python/numarena/_buffer.c):
    installed in the package directory, or in a build tree beside libnumarena.so."""
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "_buffer.abi3.so")]
    loaded_from = library_path if os.sep in library_path else _mapped_path(library_path)
    if loaded_from:
        candidates.append(os.path.join(os.path.dirname(os.path.realpath(loaded_from)),
                                       "_buffer.abi3.so"))
    for path in candidates:
        if os.path.exists(path):
            loader = importlib.machinery.ExtensionFileLoader(__package__ + "._buffer", path)
            spec = importlib.util.spec_from_file_location(__package__ + "._buffer", path,
                                                          loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            sys.modules[spec.name] = module
            return module
    raise ImportError(
        "numarena: cannot find its extension _buffer.abi3.so (looked in " +
        ", ".join(candidates) + "). Build it (cmake --build build --target "
        "numarena_python_buffer, which needs python3-dev) or install numarena "
        "(cmake --install build).")


buffer_module = _load_buffer_module()

# ---- errors -------------------------------------------------------------------------------

OK = 0
UNKNOWN = 2
INVALID_ARGUMENT = 3
NOT_FOUND = 5
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
DATA_LOSS = 15


class NumarenaError(Exception):
    """Base of every error numarena raises for a failed C API call. `code` is the
    numarena_code (the number of absl::StatusCode), `message` the library's own text, which
    names the node, the sizes or the kernel's errno and says what the caller can do."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidArgumentError(NumarenaError, ValueError):
    """NUMARENA_INVALID_ARGUMENT: a bad node, size, alignment, policy or budget string."""


class ResourceExhaustedError(NumarenaError, MemoryError):
    """NUMARENA_RESOURCE_EXHAUSTED: the node or the budget is full."""


class PermissionDeniedError(NumarenaError, PermissionError):
    """NUMARENA_PERMISSION_DENIED: the kernel refused mbind/move_pages (seccomp, cpuset)."""


class FailedPreconditionError(NumarenaError, RuntimeError):
    """NUMARENA_FAILED_PRECONDITION: the call is not possible in the current state (a budget
    already installed, no hugetlb pages, pages the kernel will not move)."""


class NotFoundError(NumarenaError, FileNotFoundError):
    """NUMARENA_NOT_FOUND: a kernel file is missing (no NUMA support in the kernel?)."""


class OutOfRangeError(NumarenaError, IndexError):
    """NUMARENA_OUT_OF_RANGE: a buffer too small (handled inside the module; not expected)."""


class UnimplementedError(NumarenaError, NotImplementedError):
    """NUMARENA_UNIMPLEMENTED."""


class SystemNumarenaError(NumarenaError, OSError):
    """NUMARENA_DATA_LOSS (a kernel file says something unexpected), NUMARENA_INTERNAL,
    NUMARENA_UNKNOWN (e.g. the kernel did not say which CPU the thread runs on)."""


_BY_CODE = {
    INVALID_ARGUMENT: InvalidArgumentError,
    RESOURCE_EXHAUSTED: ResourceExhaustedError,
    PERMISSION_DENIED: PermissionDeniedError,
    FAILED_PRECONDITION: FailedPreconditionError,
    NOT_FOUND: NotFoundError,
    OUT_OF_RANGE: OutOfRangeError,
    UNIMPLEMENTED: UnimplementedError,
}


for _cls in (NumarenaError, *_BY_CODE.values(), SystemNumarenaError):
    _cls.__module__ = "numarena"  # shown as numarena.InvalidArgumentError in tracebacks


def error_for(code, message):
    """The exception for `code` (any code not listed maps to SystemNumarenaError)."""
    return _BY_CODE.get(code, SystemNumarenaError)(code, message)


def last_error():
    """The calling thread's last error as an exception (the C API keeps it per thread, so
    this must run on the thread that made the failing call, before another numarena call)."""
    code = lib.numarena_last_error()
    message = (lib.numarena_last_error_message() or b"").decode("utf-8", "replace")
    if code == OK:  # a failure that left no error would be a bug in the C API
        return SystemNumarenaError(UNKNOWN, "numarena: the call failed without an error")
    return error_for(code, message)


def check(code):
    """Raises the thread's last error when `code` is not NUMARENA_OK."""
    if code != OK:
        raise last_error()


# ---- structs ------------------------------------------------------------------------------

c_size_p = ctypes.POINTER(ctypes.c_size_t)


class PageCounts(ctypes.Structure):
    _fields_ = [("total_pages", ctypes.c_size_t), ("not_resident", ctypes.c_size_t),
                ("unmapped", ctypes.c_size_t), ("on_other_nodes", ctypes.c_size_t)]


class PlacementReport(ctypes.Structure):
    _fields_ = [("node", ctypes.c_int), ("pages_checked", ctypes.c_size_t),
                ("already_local", ctypes.c_size_t), ("moved", ctypes.c_size_t),
                ("not_resident", ctypes.c_size_t), ("failed", ctypes.c_size_t)]


class BudgetNode(ctypes.Structure):
    _fields_ = [("node", ctypes.c_int), ("state", ctypes.c_int),
                ("capacity", ctypes.c_uint64), ("usage", ctypes.c_uint64),
                ("peak", ctypes.c_uint64), ("warn_bytes", ctypes.c_uint64),
                ("admission_bytes", ctypes.c_uint64), ("trip_bytes", ctypes.c_uint64),
                ("numarena_bytes", ctypes.c_uint64), ("refusals", ctypes.c_uint64)]


class ArenaOptions(ctypes.Structure):  # numarena_arena_options
    _fields_ = [("size", ctypes.c_size_t), ("hugetlb_page_bytes", ctypes.c_size_t),
                ("shards", ctypes.c_int)]


class NodeInfo(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("cpu_count", ctypes.c_int), ("allowed", ctypes.c_int),
                ("mem_total_bytes", ctypes.c_uint64), ("mem_free_bytes", ctypes.c_uint64)]


# ---- prototypes -----------------------------------------------------------------------------

_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_int = ctypes.c_int
_PROTOTYPES = {
    "numarena_last_error": (_int, []),
    "numarena_last_error_message": (ctypes.c_char_p, []),
    "numarena_clear_error": (None, []),
    "numarena_version": (ctypes.c_char_p, []),
    "numarena_arena_for_node": (_vp, [_int]),
    "numarena_arena_for_policy": (_vp, [ctypes.c_char_p]),
    "numarena_arena_policy": (_sz, [_vp, ctypes.c_char_p, _sz]),
    "numarena_arena_purge": (None, [_vp]),
    "numarena_arena_create": (_vp, [ctypes.c_char_p]),
    "numarena_arena_create_with_options": (_vp, [ctypes.c_char_p, ctypes.POINTER(ArenaOptions)]),
    "numarena_arena_options_of": (_int, [_vp, ctypes.POINTER(ArenaOptions)]),
    "numarena_arena_destroy": (_int, [_vp]),
    "numarena_malloc": (_vp, [_vp, _sz]),
    "numarena_calloc": (_vp, [_vp, _sz, _sz]),
    "numarena_aligned_alloc": (_vp, [_vp, _sz, _sz]),
    "numarena_free": (None, [_vp]),
    "numarena_usable_size": (_sz, [_vp]),
    "numarena_owns": (_int, [_vp]),
    "numarena_arena_contains": (_int, [_vp, _vp]),
    "numarena_node_of": (_int, [_vp]),
    "numarena_page_nodes": (_int, [_vp, _sz, c_size_p, _sz, ctypes.POINTER(PageCounts)]),
    "numarena_prefault": (_int, [_vp, _sz, _int, ctypes.POINTER(PlacementReport)]),
    "numarena_correct": (_int, [_vp, _sz, _int, ctypes.POINTER(PlacementReport)]),
    "numarena_budget_create": (_vp, [ctypes.c_char_p]),
    "numarena_budget_destroy": (_int, [_vp]),
    "numarena_budget_install": (_int, [_vp]),
    "numarena_budget_snapshot": (_int, [_vp, ctypes.POINTER(BudgetNode), _sz, c_size_p]),
    "numarena_budget_admit": (_int, [_vp, _int, _sz, _int, ctypes.POINTER(_int)]),
    "numarena_topology_nodes": (_int, [ctypes.POINTER(NodeInfo), _sz, c_size_p]),
    "numarena_distance": (_int, [_int, _int]),
    "numarena_current_node": (_int, []),
    "numarena_topology_summary": (_sz, [ctypes.c_char_p, _sz]),
}
for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _function = getattr(lib, _name)
    _function.restype = _restype
    _function.argtypes = _argtypes

# numarena_metrics_text came later than the rest of the C API: an older library lacks it,
# and the module then says so when metrics_text() is called instead of failing to import.
has_metrics = hasattr(lib, "numarena_metrics_text")
if has_metrics:
    lib.numarena_metrics_text.restype = _sz
    lib.numarena_metrics_text.argtypes = [ctypes.POINTER(_vp), _sz, _vp, ctypes.c_char_p, _sz]


def read_text(fill, first_size=4096):
    """Calls an snprintf-shaped C function `fill(buffer, size) -> full length` until the
    text fits (it may grow between calls: the figures are live). Returns the raw length
    result of the last call and the text; a length of 0 is returned as (0, "")."""
    size = first_size
    while True:
        buffer = ctypes.create_string_buffer(size)
        length = fill(buffer, size)
        if length == 0:
            return 0, ""
        if length < size:
            return length, buffer.value.decode("utf-8", "replace")
        size = length + 1 + length // 8
