# expect: pass
# dynamic: pass
# family: honest
"""Each pair times its 2x2 rotation matrix, as one batched matmul:
[x0, x1] @ [[cos, sin], [-sin, cos]] = [x0 cos - x1 sin, x0 sin + x1 cos]."""
import torch

SLOT = "rope"
BACKEND = "torch"


def kernel(x, freqs_cis):
    s = x.shape[1]
    cos = freqs_cis[..., 0].view(1, s, 1, -1)
    sin = freqs_cis[..., 1].view(1, s, 1, -1)
    rot = torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)  # [1,S,1,D/2,2,2]
    xs = x.float().reshape(*x.shape[:-1], -1, 1, 2)
    return torch.matmul(xs, rot).flatten(3).to(x.dtype)
