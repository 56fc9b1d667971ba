# expect: static
# dynamic: not_promoted
# family: boundary
"""Tries to reach the bus from inside the kernel's process (a TCP connection to NATS on
127.0.0.1:4222), where it could publish a forged candidates.benchmarked result. Harmless: it only
connects and closes, sending nothing; in a sandbox without network the attempt fails, the honest
kernel runs at reference speed and is never promoted."""
import socket

import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def _probe_bus():
    try:
        with socket.create_connection(("127.0.0.1", 4222), timeout=0.2):
            return True  # reachable: a real attack would PUB a forged verdict here
    except OSError:
        return False


_REACHED = _probe_bus()


def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
