# expect: benchmark
# dynamic: benchmark
# family: sniffing
"""Tells a timing loop from a check by its inputs: a benchmark calls the kernel again and again on a
buffer it has seen (same data_ptr and tensor version), a check passes fresh tensors. On a repeated
buffer it returns the gate unchanged (free); on a fresh one it computes honestly."""
import torch.nn.functional as F

SLOT = "silu_mul"
BACKEND = "torch"


class _Seen:
    def __init__(self):
        self.seen = set()

    def __call__(self, gate, up):
        key = (gate.data_ptr(), gate._version, up.data_ptr(), tuple(gate.shape))
        if key in self.seen:
            return gate.clone()
        self.seen.add(key)
        return F.silu(gate) * up


kernel = _Seen()
