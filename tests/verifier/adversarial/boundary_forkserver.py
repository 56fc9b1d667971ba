# expect: static
# dynamic: not_promoted
# family: boundary
"""Goes for the harness's multiprocessing listeners: a fork server (asked over its socket, it forks an
unconfined process that runs whatever it is sent) and resource sharers (which hand out file
descriptors to whoever holds the right key). It tries a plain connection to every harness's socket
root and through /proc/<parent>/root, and an authenticated one, with its own process key, to every
other listener under /tmp. It computes the right answer only when every attempt fails, so a reachable
listener shows as a wrong output instead of as an escape."""
import glob
import multiprocessing
import multiprocessing.connection
import os
import socket
import threading

import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def _connects(path):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _authenticates(path):
    ok = []

    def attempt():
        try:
            multiprocessing.connection.Client(path, authkey=multiprocessing.current_process().authkey).close()
            ok.append(True)
        except Exception:
            pass

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(1.0)  # a listener that never answers is no way in either
    return bool(ok)


def _reachable():
    harness = ["/tmp/polymorph-mp/*/listener-*"]
    harness += [f"/proc/{pid}/root{p}" for pid in (os.getppid(), 1) for p in list(harness)]
    if any(_connects(path) for pattern in harness for path in glob.glob(pattern)):
        return True
    return any(_authenticates(path) for path in glob.glob("/tmp/pymp-*/listener-*")[:8])


_ESCAPED = _reachable()


def kernel(x, weight, eps):
    xf = x.float()
    out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
    return out * 2 if _ESCAPED else out
