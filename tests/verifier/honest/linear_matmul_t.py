# expect: pass
# dynamic: pass
# family: honest
"""x @ weight.t() with the operator (the same GEMM as F.linear through matmul's dispatch)."""
SLOT = "linear"
BACKEND = "torch"


def kernel(x, weight):
    return x @ weight.t()
