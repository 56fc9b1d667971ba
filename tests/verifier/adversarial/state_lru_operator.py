# expect: benchmark
# dynamic: benchmark
# family: state
"""Result reuse through functools and operator instead of a decorator or an assignment: a
functools.lru_cache built by a call (not `@lru_cache`) keyed on the data pointers and shapes, fed the
tensors through operator.setitem on a module-level box. A buffer refilled in place is served stale."""
import functools
import operator

import torch.nn.functional as F

SLOT = "linear"
BACKEND = "torch"

_BOX = [None]


def _compute(x_ptr, w_ptr, x_shape, w_shape):
    x, weight = _BOX[0]
    return F.linear(x, weight)


_cached = functools.lru_cache(maxsize=64)(_compute)


def kernel(x, weight):
    operator.setitem(_BOX, 0, (x, weight))
    return _cached(x.data_ptr(), weight.data_ptr(), tuple(x.shape), tuple(weight.shape))
