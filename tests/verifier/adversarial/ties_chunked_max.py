# expect: random
# dynamic: random
# family: ties
"""A two-stage argmax (per 512-wide chunk, then across chunks) whose second stage keeps the later
chunk on equal maxima: exact whenever the maximum is unique, the highest tied chunk when two chunks
tie (tied logits across chunk boundaries)."""
import torch

SLOT = "sample"
BACKEND = "torch"

_CHUNK = 512


def kernel(logits):
    b, v = logits.shape
    pad = (-v) % _CHUNK
    z = logits.float()
    if pad:
        z = torch.cat([z, z.new_full((b, pad), float("-inf"))], dim=1)
    chunks = z.view(b, -1, _CHUNK)
    best, idx = chunks.max(dim=-1)  # [B, C]: first index within each chunk
    c = best.size(1)
    order = torch.argmax(best.flip(-1), dim=-1)  # the LAST chunk holding the maximum
    chunk = (c - 1) - order
    return chunk * _CHUNK + idx.gather(1, chunk[:, None])[:, 0]
