"""What the static checks forbid, as data: modules, builtins, dotted names and dtype downgrades.

Kept apart from the AST walk so a reviewer can read the policy without reading the visitor.
"""

from __future__ import annotations

# Top-level modules a kernel may import. Anything else is refused: a kernel computes on tensors,
# it has no business with files, processes, the interpreter or the clock.
ALLOWED_MODULES = frozenset({
    "__future__", "torch", "triton", "math", "functools", "typing", "typing_extensions", "numpy",
    "operator", "itertools", "dataclasses", "enum", "abc",
})

# Named explicitly so the reason is clear (they would be refused by the allow-list anyway).
FORBIDDEN_MODULES: dict[str, str] = {
    **{m: "process or interpreter access" for m in (
        "os", "sys", "subprocess", "ctypes", "cffi", "multiprocessing", "threading", "_thread",
        "signal", "importlib", "builtins", "inspect", "gc", "atexit", "faulthandler", "resource",
        "runpy", "code", "codeop", "types", "weakref", "sysconfig", "site", "concurrent", "asyncio",
        "platform", "mmap", "dis", "traceback", "warnings", "contextvars",
    )},
    **{m: "timing access" for m in ("time", "timeit", "datetime", "sched", "cProfile", "profile")},
    **{m: "file, network or serialisation access" for m in (
        "pickle", "marshal", "shelve", "copyreg", "dill", "shutil", "pathlib", "io", "tempfile",
        "glob", "fileinput", "socket", "ssl", "http", "urllib", "requests", "json", "sqlite3", "zipfile",
        "tarfile", "gzip", "csv",
    )},
}

# Builtins that execute, import, open or rewrite things; referenced at all (not only called) they fail.
FORBIDDEN_BUILTINS: dict[str, str] = {
    "exec": "executes generated code",
    "eval": "executes generated code",
    "compile": "compiles generated code (torch.compile is fine)",
    "open": "opens files",
    "__import__": "imports dynamically",
    "globals": "reaches module state",
    "locals": "reaches frame state",
    "vars": "reaches object state",
    "setattr": "rewrites attributes (monkey-patching)",
    "delattr": "deletes attributes (monkey-patching)",
    "breakpoint": "enters the debugger",
    "input": "reads stdin",
    "exit": "exits the worker",
    "quit": "exits the worker",
    "memoryview": "aliases raw memory",
    "__builtins__": "reaches the builtins module",
}

# Dunder attributes are a way around every other rule (x.__class__.__mro__[-1].__subclasses__()...).
ALLOWED_DUNDER_ATTRS = frozenset({"__init__", "__name__", "__qualname__", "__doc__"})

# Dotted names (after alias resolution) that touch timing, streams, graphs, threads or internals.
# A name matches when it equals an entry or starts with it followed by a dot.
TIMING_NAMES: dict[str, str] = {
    **{n: "timing or stream tampering" for n in (
        "torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.Stream", "torch.cuda.stream",
        "torch.cuda.set_stream", "torch.cuda.ExternalStream", "torch.cuda.StreamContext",
        "torch.cuda.graphs", "torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
        "torch.cuda._sleep", "torch.cuda.set_sync_debug_mode", "torch.Event", "torch.Stream",
        "torch.cpu.synchronize", "torch.cpu.Stream", "torch.cpu.stream", "torch.cpu.set_stream",
        "torch.accelerator.synchronize", "torch.accelerator.set_stream", "torch.mps.synchronize",
        "torch.mps.event", "torch.xpu.synchronize", "torch.xpu.Event", "torch.xpu.Stream",
        "torch.set_num_threads", "torch.set_num_interop_threads", "torch.utils.benchmark",
        "torch.profiler", "torch.autograd.profiler", "triton.testing",
    )},
    **{n: "native code or interpreter internals" for n in (
        "torch._C", "torch.utils.cpp_extension", "torch.ops.load_library", "torch.cuda.cudart",
        "torch.classes.load_library", "numpy.ctypeslib", "torch.multiprocessing", "torch.hub",
        "torch.load", "torch.save", "numpy.load", "numpy.save", "numpy.fromfile",
    )},
    **{n: "overrides torch operators or modes (could change what the reference computes)" for n in (
        "torch._ops", "torch._library", "torch.library.Library", "torch.library.impl", "torch.library.define",
        "torch.library.register_kernel", "torch.library.fallthrough_kernel", "torch.library._scoped_library",
        "torch.overrides", "torch.utils._python_dispatch", "torch._subclasses", "torch.jit.load", "torch.package",
    )},
    **{n: "dynamic attribute access (hides what is accessed)" for n in (
        "operator.attrgetter", "operator.methodcaller",
    )},
    **{n: "precision downgrade (global math mode)" for n in (
        "torch.set_float32_matmul_precision", "torch.set_default_dtype", "torch.autocast", "torch.amp",
        "torch.cuda.amp", "torch.cpu.amp", "torch.set_autocast_enabled",
    )},
}

# Canonical dtype and bits per name; a cast below the slot input's precision is a downgrade. Plain
# integer types are not listed: an integer mask or index (argmax of a uint8 mask) is honest, and an
# integer quantisation of values is caught by the numeric checks anyway.
_LOW_PRECISION: dict[str, tuple[str, int]] = {
    "float16": ("float16", 16), "half": ("float16", 16), "HalfTensor": ("float16", 16),
    "bfloat16": ("bfloat16", 16), "BFloat16Tensor": ("bfloat16", 16),
    **{n: (n, 8) for n in (
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
        "float8e4nv", "float8e5", "float8e4b15", "float8e4b8", "float8e5b16", "qint8", "quint8",
    )},
    **{n: (n, 4) for n in ("quint4x2", "float4_e2m1fn_x2")},
}
# Tensor methods that cast by themselves.
_LOW_PRECISION_METHODS: dict[str, tuple[str, int]] = {
    "half": ("float16", 16), "bfloat16": ("bfloat16", 16),
}
_INPUT_BITS = {"float64": 64, "float32": 32, "bfloat16": 16, "float16": 16}
_DTYPE_MODULES = ("torch", "torch.cuda", "triton.language")


def _is_downgrade(dtype: tuple[str, int], input_dtype: str) -> bool:
    name, bits = dtype
    have = _INPUT_BITS.get(input_dtype, 32)
    # bfloat16 <-> float16 keep the bits but lose range or mantissa.
    return bits < have or (bits == have == 16 and name != input_dtype)


def downgrade_dtype(dotted: str, input_dtype: str) -> str | None:
    """The low-precision dtype a dotted name refers to (torch.float16, tl.bfloat16...), if a downgrade."""
    module, _, leaf = dotted.rpartition(".")
    if module not in _DTYPE_MODULES or leaf not in _LOW_PRECISION:
        return None
    return leaf if _is_downgrade(_LOW_PRECISION[leaf], input_dtype) else None


def downgrade_method(method: str, input_dtype: str) -> bool:
    dtype = _LOW_PRECISION_METHODS.get(method)
    return dtype is not None and _is_downgrade(dtype, input_dtype)


# Methods that mutate a container or a tensor in place (tensor in-place ops end in "_").
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "add", "discard",
    "remove", "appendleft", "extendleft", "put", "push", "move_to_end",
})
MEMOIZING_DECORATORS = frozenset({"functools.lru_cache", "functools.cache", "functools.cached_property"})


def is_mutating_method(name: str) -> bool:
    return name in MUTATING_METHODS or (name.endswith("_") and not name.startswith("_"))


def forbidden_segment(dotted: str) -> str | None:
    """The path up to a forbidden module reached through an attribute (torch.os, typing.sys...)."""
    parts = dotted.split(".")
    end = next((i for i, part in enumerate(parts) if i and part in FORBIDDEN_MODULES), None)
    return None if end is None else ".".join(parts[: end + 1])


def match_prefix(dotted: str, table: dict[str, str]) -> str | None:
    """The table entry `dotted` equals or lives under, if any."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in table:
            return candidate
    return None
