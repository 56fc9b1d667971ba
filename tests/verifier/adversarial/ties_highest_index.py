# expect: random
# dynamic: random
# family: ties
"""Greedy argmax that returns the highest index among tied maxima (argmax of the reversed row):
identical on continuous random logits, where ties never happen, and wrong on tied logits, where the
contract asks for the lowest index."""
import torch

SLOT = "sample"
BACKEND = "torch"


def kernel(logits):
    v = logits.size(-1)
    return (v - 1) - torch.argmax(logits.flip(-1), dim=-1)
