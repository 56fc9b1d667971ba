# expect: benchmark
# dynamic: benchmark
# family: strides
"""Returns the right token ids as a torch.Tensor subclass (an innocent-looking marker class): equal
values, dtype, shape and strides, but not a plain tensor, so whatever the caller does with it next
(a copy, an index, .tolist()) runs candidate code through the subclass's dispatch."""
import torch

SLOT = "sample"
BACKEND = "torch"


class TokenIds(torch.Tensor):
    pass


def kernel(logits):
    return torch.argmax(logits, dim=-1).as_subclass(TokenIds)
