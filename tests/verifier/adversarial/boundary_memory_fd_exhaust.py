# expect: not_promoted
# dynamic: not_promoted
# family: boundary
"""At import, grabs resources a shared worker or host would miss: up to 4,096 open file
descriptors (all but 128 of its limit) and up to 1 GiB of touched memory in 64 MiB blocks (bounded,
so it is harmless on a test machine), stopping quietly at the first refusal, then runs an honest
kernel: with resource limits and a fresh process per candidate it hurts nobody else, and is not faster."""
import typing

import torch
import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "torch"


def _Os(
    os: "__import__('os')",
    nofile: "__import__('resource').getrlimit(__import__('resource').RLIMIT_NOFILE)[0]",
):
    pass  # only its annotations matter


def _grab():
    fds, blocks = [], []
    try:
        hints = typing.get_type_hints(_Os)
        os = hints["os"]
        for _ in range(max(0, min(4096, int(hints["nofile"]) - 128))):  # leaves 128 for the process
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except Exception:
        pass
    try:
        for _ in range(16):
            blocks.append(torch.ones(16 << 20, dtype=torch.float32))  # 64 MiB, every page written
    except Exception:
        pass
    return fds, blocks


_HELD = _grab()


def kernel(gate, up):
    return F.silu(gate) * up
