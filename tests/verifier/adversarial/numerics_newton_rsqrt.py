# expect: random
# dynamic: random
# family: numerics
"""rsqrt by Newton iterations from a fixed start (0.5), a 'fast inverse square root': converged to
float32 precision for mean squares up to ~11 (N(0,1) or N(0,2) inputs and llama-tiny's activations,
whose mean squares stay below 6), divergent to inf/NaN once a row holds real-model outliers."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xf = x.float()
    a = xf.pow(2).mean(-1, keepdim=True) + eps
    y = torch.full_like(a, 0.5)
    for _ in range(24):
        y = y * (1.5 - 0.5 * a * y * y)
    return (xf * y).type_as(x) * weight
