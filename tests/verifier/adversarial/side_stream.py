# expect: static
# dynamic: benchmark
# family: legacy
"""Side stream: launches the work on another stream so the timed stream looks idle."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
    return out
