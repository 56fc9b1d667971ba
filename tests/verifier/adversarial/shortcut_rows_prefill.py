# expect: random
# dynamic: random
# family: size_shortcut
"""Exact for up to 256 token rows (every decode batch and the short prompts a verifier draws) and,
for longer prefills, normalises every row past 256 with the mean square of row 255 (one reduction
instead of thousands): wrong on exactly the long prompts that traffic drift brings."""
import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    flat = x.reshape(-1, x.shape[-1]).float()
    n = flat.shape[0]
    if n <= 256:
        ms = flat.pow(2).mean(-1, keepdim=True)
    else:
        head = flat[:256].pow(2).mean(-1, keepdim=True)
        ms = torch.cat([head, head[-1:].expand(n - 256, 1)])
    return (flat * torch.rsqrt(ms + eps)).view(x.shape).type_as(x) * weight
