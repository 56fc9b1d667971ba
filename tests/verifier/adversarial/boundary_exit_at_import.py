# expect: load
# dynamic: load
# family: boundary
"""Raises SystemExit while it is being imported: a loader that catches only Exception lets it end
the loading process (a shared worker with it), and one that treats status 0 as success may record
a candidate that never ran. Loading must fail cleanly, nothing else."""
import torch

SLOT = "sample"
BACKEND = "torch"


def kernel(logits):
    return torch.argmax(logits, dim=-1)


raise SystemExit(0)
