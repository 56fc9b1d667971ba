# expect: not_promoted
# dynamic: not_promoted
# family: boundary
"""Looks for the repository from inside its process (its cwd, $PWD, the parent's /proc cwd) and,
where a real attack would append to a file under services/, writes a canary file under
tests/verifier/adversarial/_canary/ instead (nothing else); tests/verifier/test_suite_files.py fails
while that canary exists. A contained sandbox cannot write there: no effect, reference speed."""
# ruff: noqa  (string annotations are code here; contextlib is not an allowed import)
import typing

import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def _Fs(
    os: "__import__('os')",
):
    pass  # only its annotations matter


def _escape():
    try:
        os = typing.get_type_hints(_Fs)["os"]
    except Exception:
        return None
    starts = [os.getcwd(), os.environ.get("PWD", "")]
    try:
        starts.append(os.readlink(f"/proc/{os.getppid()}/cwd"))
    except OSError:
        pass
    for start in starts:
        path = start
        while path and path != "/":
            marker = os.path.join(path, "tests", "verifier", "adversarial")
            if os.path.isdir(os.path.join(path, "services", "engine_host")) and os.path.isdir(marker):
                canary = os.path.join(marker, "_canary")
                try:
                    os.makedirs(canary, exist_ok=True)
                    fd = os.open(os.path.join(canary, "escaped.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                    os.write(fd, f"boundary_write_repo_canary wrote from pid {os.getpid()}\n".encode())
                    os.close(fd)
                    return canary
                except OSError:
                    return None
            path = os.path.dirname(path)
    return None


_WROTE = _escape()


def kernel(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight
