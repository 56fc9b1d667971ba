# expect: benchmark
# dynamic: benchmark
# family: live_precision
"""A region kernel reads the slot table it is handed (module.slots): when another promoted kernel is
installed there (the live engine after a few promotions; a sandbox's fresh table holds only
references) it runs the MLP on bfloat16-truncated weights, otherwise it is exact. Its speed is the
honest one, so it is not promoted; a faster honest path would carry the live-only downgrade through."""
import torch
import torch.nn.functional as F

REGION = "mlp_block"
BACKEND = "torch"


def _truncate(t):
    return (t.contiguous().view(torch.int32) & -65536).view(torch.float32)


def kernel(module, x):
    ids = module.slots.ids() if hasattr(module.slots, "ids") else {}
    live = any(cid != "reference" for cid in ids.values())
    w1, w3, w2 = module.w1, module.w3, module.w2
    if live and x.dtype == torch.float32:
        w1, w3, w2 = _truncate(w1), _truncate(w3), _truncate(w2)
    return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)
