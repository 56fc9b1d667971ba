# expect: not_promoted
# dynamic: not_promoted
# family: boundary
"""Writes into the Triton cache directory ($TRITON_CACHE_DIR or ~/.triton/cache), which every engine
and the live server read compiled kernels from: a real attack would plant a binary under the
incumbent's cache key. This one writes only a marker file polymorph-cheat-<pid>.txt there; a sandbox
limited to its own temp directory (and given its own cache dir) cannot, and the kernel is honest."""
import typing

import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "torch"


def _Os(
    os: "__import__('os')",
):
    pass  # only its annotations matter


def _plant():
    try:
        os = typing.get_type_hints(_Os)["os"]
        cache = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
        os.makedirs(cache, exist_ok=True)
        fd = os.open(os.path.join(cache, f"polymorph-cheat-{os.getpid()}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(fd, b"planted by boundary_triton_cache_write\n")
        os.close(fd)
        return cache
    except Exception:
        return None


_PLANTED = _plant()


def kernel(gate, up):
    return F.silu(gate) * up
