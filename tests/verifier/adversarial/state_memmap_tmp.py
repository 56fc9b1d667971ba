# expect: not_promoted
# dynamic: not_promoted
# family: state
"""Shares results between processes through a numpy.memmap file (/tmp/polymorph-cheat-state-silu.bin,
harmless): a process that finds a result for the same input fingerprint (shape and 16 elements)
returns it without computing, so a benchmark on inputs an earlier process checked looks free. In a
sandbox that cannot write there, or with fresh inputs, it computes honestly: no effect, not faster."""
import numpy
import torch
import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "torch"

_PATH = "/tmp/polymorph-cheat-state-silu.bin"
_SLOTS = 1 << 22  # float32 elements in the file (16 MiB)


def _store():
    try:
        return numpy.memmap(_PATH, dtype=numpy.float32, mode="r+", shape=(_SLOTS,))
    except OSError:
        try:
            return numpy.memmap(_PATH, dtype=numpy.float32, mode="w+", shape=(_SLOTS,))
        except OSError:
            return None


_FILE = _store()


def _fingerprint(gate, up):
    g, u = gate.reshape(-1), up.reshape(-1)
    return [float(gate.numel()), *g[:8].tolist(), *u[:8].tolist()]


def kernel(gate, up):
    out_n = gate.numel()
    head = 17
    if _FILE is None or head + out_n > _SLOTS or gate.dtype != torch.float32:
        return F.silu(gate) * up
    key = _fingerprint(gate, up)
    stored = torch.from_numpy(numpy.asarray(_FILE[:head]))
    if stored.tolist() == key:
        return torch.from_numpy(numpy.array(_FILE[head:head + out_n])).view(gate.shape)
    out = F.silu(gate) * up
    numpy.copyto(_FILE[head:head + out_n], out.reshape(-1).numpy())
    numpy.copyto(_FILE[:head], numpy.asarray(key, dtype=numpy.float32))
    return out
