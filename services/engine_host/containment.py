"""OS-level containment of a sandbox process, as far as this kernel allows without extra privileges.

Applied in the sandbox before any candidate code is imported; each measure reports whether it took
effect, so the host can say what its sandboxes are confined by (and tests can assert it):

- dies with its parent (PR_SET_PDEATHSIG), own session (its process group is killed with it);
- a private working directory, a scrubbed environment (no POLYMORPH_* settings, no NATS URL or
  credentials), private Triton / inductor caches inside it, no byte-code writes;
- resource limits: no core dumps, bounded file size and open files;
- no network: its own network namespace (root), and Landlock's TCP rules where the kernel has them;
- its own mount namespace, the harness's multiprocessing sockets (the sandboxes' fork server) hidden;
- no capabilities (dropped, and root's re-grant on exec locked off), so the harness, which is not
  dumpable (`harden_harness`), cannot be read through /proc/<pid>/mem or environ or ptraced;
- Landlock: writes only below its working directory and /dev, no signals to processes outside it.
The harness is a child subreaper: whatever a sandbox forks and orphans comes back to the harness,
which freezes and kills it together with the sandbox (`signal_all`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import struct
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_SECUREBITS = 28
_PR_CAPBSET_DROP = 24
_SECURE_NOROOT_LOCKED = 0x0F  # noroot, no_setuid_fixup, each locked: exec never re-grants root's caps
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNS = 0x00020000
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS_WRITE = {  # landlock access rights that change the file system, by the ABI that introduced them
    1: (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10)
       | (1 << 11) | (1 << 12),  # write_file, remove_dir/file, make_char/dir/reg/sock/fifo/block/sym
    2: 1 << 13,  # refer
    3: 1 << 14,  # truncate
    5: 1 << 15,  # ioctl_dev
}
_NET_TCP = (1 << 0) | (1 << 1)  # bind_tcp, connect_tcp (ABI 4)
_SCOPE = (1 << 0) | (1 << 1)  # abstract unix sockets, signals (ABI 6)
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "TRITON_INTERPRET",
            "LD_LIBRARY_PATH", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST")


@dataclass(frozen=True)
class Confinement:
    work_dir: str
    threads: int = 1
    max_file_bytes: int = 4 << 30
    max_open_files: int = 4096
    network: bool = False  # True only for tests of the containment itself
    skip: tuple[str, ...] = ()  # measures switched off by configuration (reported as such), see MEASURES
    hide: tuple[str, ...] = ()  # directories covered by an empty tmpfs (the harness's multiprocessing sockets)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _err() -> str:
    return os.strerror(ctypes.get_errno())


def harden_harness() -> None:
    """The harness: dies with the host, no process without CAP_SYS_PTRACE may read its memory or
    environment, and what its sandboxes orphan is reparented to it (so it can be found and killed)."""
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def scrub_environment(work_dir: Path, clear: bool = True) -> None:
    """Private caches, home and temp dir always; with `clear`, nothing else the parent had."""
    if clear:
        kept = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
        os.environ.clear()
        os.environ.update(kept)
    os.environ.update({
        "HOME": str(work_dir), "TMPDIR": str(work_dir), "PYTHONDONTWRITEBYTECODE": "1",
        "TRITON_CACHE_DIR": str(work_dir / "triton-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(work_dir / "inductor-cache"),
    })
    sys.dont_write_bytecode = True


MEASURES = ("own_session", "environment", "network_namespace", "mount_namespace", "rlimits", "capabilities",
            "landlock")


def confine(c: Confinement) -> dict[str, str]:
    """Apply every measure; returns measure → "on" or why it is off. Must run before torch starts
    threads (a user namespace needs a single-threaded caller) and before any candidate import."""
    libc, done = _libc(), {}
    parent = os.getppid()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the flag was set
        os._exit(1)
    done["dies_with_parent"] = "on"
    off = "off: switched off by configuration"
    try:
        if "own_session" in c.skip:
            done["own_session"] = off
        else:
            os.setsid()
            done["own_session"] = "on"
    except OSError as exc:
        done["own_session"] = f"off: {exc}"
    work = Path(c.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    done["private_dir"] = "on"
    scrub_environment(work, clear="environment" not in c.skip)
    done["environment"] = off if "environment" in c.skip else "on"
    done["network_namespace"] = ("off: allowed for this sandbox" if c.network else off
                                 if "network_namespace" in c.skip else _new_netns(libc))
    done["mount_namespace"] = off if "mount_namespace" in c.skip else _hide(libc, c.hide)
    done["rlimits"] = off if "rlimits" in c.skip else _limits(c)
    done["capabilities"] = off if "capabilities" in c.skip else _drop_capabilities(libc)
    done["landlock"] = off if "landlock" in c.skip else _landlock(libc, work, c.network)
    return done


def _new_netns(libc: ctypes.CDLL) -> str:
    if libc.unshare(_CLONE_NEWNET) == 0:
        return "on"
    first = _err()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
        return "on (user namespace)"
    return f"off: unshare: {first}; with a user namespace: {_err()}"


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(libc: ctypes.CDLL) -> str:
    if os.geteuid() == 0 and libc.prctl(_PR_SET_SECUREBITS, _SECURE_NOROOT_LOCKED, 0, 0, 0) != 0:
        return f"off: securebits: {_err()}"
    for cap in range(64):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last cap: ignored
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        return f"off: capset: {_err()}"
    return "on (none left)"


def _hide(libc: ctypes.CDLL, dirs: tuple[str, ...]) -> str:
    """Its own mount namespace, with an empty tmpfs over each of `dirs` (the fork server's and the
    resource sharer's sockets live there: reaching them would hand out unconfined processes)."""
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"off: unshare: {_err()}"
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return f"off: making mounts private: {_err()}"
    for d in dirs:
        if libc.mount(b"tmpfs", d.encode(), b"tmpfs", 0, b"size=64k,mode=0000") != 0:
            return f"off: hiding {d}: {_err()}"
    return f"on ({len(dirs)} dir(s) hidden)"


def _limits(c: Confinement) -> str:
    wanted = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, c.max_file_bytes),
              (resource.RLIMIT_NOFILE, c.max_open_files)]
    failed = []
    for which, value in wanted:
        try:
            _soft, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, cap))
        except (OSError, ValueError) as exc:
            failed.append(f"{which}: {exc}")
    return "on" if not failed else "partly: " + "; ".join(failed)


def _landlock(libc: ctypes.CDLL, work: Path, network: bool) -> str:
    abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 1:
        return f"off: landlock unavailable ({_err()})"
    fs = 0
    for version, bits in _FS_WRITE.items():
        if abi >= version:
            fs |= bits
    net = _NET_TCP if abi >= 4 and not network else 0
    scoped = _SCOPE if abi >= 6 else 0
    attr = struct.pack("QQQ", fs, net, scoped) if abi >= 6 else struct.pack("QQ", fs, net)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"off: create_ruleset: {_err()}"
    try:
        for allowed in (work, Path("/dev")):
            fd = os.open(allowed, os.O_PATH | os.O_DIRECTORY)
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", fs, fd), 12)
                if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, rule,
                                ctypes.c_uint32(0)) != 0:
                    return f"off: add_rule {allowed}: {_err()}"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"off: no_new_privs: {_err()}"
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            return f"off: restrict_self: {_err()}"
    finally:
        os.close(ruleset)
    parts = ["writes below its dir and /dev only"]
    if net:
        parts.append("no TCP")
    if scoped:
        parts.append("no signals out")
    return f"on (ABI {abi}: {', '.join(parts)})"


def children(pid: int) -> list[int]:
    """The live children of a process, from /proc/<pid>/task/*/children (no scan of every process)."""
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
    except OSError:
        pass
    return out


def family(pid: int, strays: set[int] | None = None) -> list[int]:
    """A sandbox, its descendants, and `strays` (orphans reparented to the harness, its subreaper)
    with their descendants."""
    roots = [pid, *(strays or ())]
    seen: set[int] = set()
    while roots:
        p = roots.pop()
        if p in seen:
            continue
        seen.add(p)
        roots.extend(children(p))
    return sorted(seen)


def forks_so_far() -> int:
    """Processes and threads created on this machine since boot (/proc/stat `processes`), -1 if unknown:
    while it stays the same, no process or thread anywhere has been created, so a family once walked
    is still whole."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"processes "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return -1


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Iterable[int]) -> float:
    """CPU time (user + system, of every thread, and of the reaped children) the processes have used."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime (fields 14-17)
        except (OSError, IndexError, ValueError):
            continue  # gone: a parent in the family that reaped it has its time in cutime
    return total * _TICK_S


def _running_tasks(pid: int) -> int:
    """Threads of the process still able to run user code (not T, t, D, Z or X); 0 once it is gone."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    running = 0
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        running += state not in ("T", "t", "Z", "X", "D")  # D: in the kernel, it stops on its way out
    return running


def wait_stopped(pids: list[int], timeout_s: float = 0.5) -> bool:
    """Until every thread of every process has taken its SIGSTOP (kill() returns before a running
    thread on another core has stopped: until then it still runs). False if some had not by timeout_s."""
    deadline = time.monotonic() + timeout_s
    pending = list(pids)
    while pending:
        pending = [p for p in pending if _running_tasks(p)]
        if pending:
            if time.monotonic() > deadline:
                return False
            os.sched_yield()  # the threads must be scheduled to take the signal: leave them the core
    return True


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


def signal_all(pid: int, sig: int, strays: set[int] | None = None) -> None:
    signal_pids(family(pid, strays) or [pid], sig)
