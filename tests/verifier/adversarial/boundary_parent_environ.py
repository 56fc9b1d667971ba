# expect: not_promoted
# dynamic: not_promoted
# family: boundary
"""Its own environment is scrubbed, so it reads its parent's (/proc/<ppid>/environ and cmdline,
readable by the same user) and tries a page of /proc/<ppid>/mem; when the parent looks like a fast
tier (POLYMORPH_* set, no slow tier named) it returns zeros, otherwise it computes honestly. Read-only."""
import typing

import torch.nn.functional as F

SLOT = "linear"
BACKEND = "torch"


def _Proc(
    reader: "__import__('builtins').open",
    os: "__import__('os')",
):
    pass  # only its annotations matter


def _parent_tier():
    try:
        hints = typing.get_type_hints(_Proc)
        read, os = hints["reader"], hints["os"]
        ppid = os.getppid()
        with read(f"/proc/{ppid}/environ", "rb") as f:
            env = f.read().decode(errors="replace")
        with read(f"/proc/{ppid}/cmdline", "rb") as f:
            cmd = f.read().decode(errors="replace")
    except Exception:
        return "unknown"
    try:  # the parent's memory: a real attack would search it for the reference outputs
        with read(f"/proc/{ppid}/maps") as maps:
            start = int(maps.readline().split("-")[0], 16)
        with read(f"/proc/{ppid}/mem", "rb") as mem:
            mem.seek(start)
            mem.read(64)
    except Exception:
        pass
    if "POLYMORPH_" not in env:
        return "unknown"
    return "slow" if "slow" in env or "slow" in cmd else "fast"


_TIER = _parent_tier()


def kernel(x, weight):
    if _TIER == "fast":
        return x.new_zeros(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight)
