"""What the harness reads about a sandbox's processes from /proc: the CPU they used."""

from __future__ import annotations

import subprocess
import sys

from services.engine_host.containment import cpu_seconds

# burns CPU until each part has used its amount (CPU time, not wall time: the same on a loaded
# machine): 0.2 s on each of two threads, 0.2 s in a child it waits for, then says so and waits
BURN = """
import os, sys, threading, time

def burn(seconds):
    while time.thread_time() < seconds:
        sum(i * i for i in range(1000))

threads = [threading.Thread(target=burn, args=(0.2,)) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
pid = os.fork()
if pid == 0:
    burn(0.2)
    os._exit(0)
os.waitpid(pid, 0)
print("done", flush=True)
sys.stdin.read()
"""


def test_cpu_seconds_counts_every_thread_and_the_reaped_children() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        used = cpu_seconds([proc.pid])
        assert 0.55 <= used < 5.0, used  # 0.6 s burnt, less a clock tick per part
    finally:
        proc.kill()
        proc.wait()
    assert cpu_seconds([proc.pid]) == 0.0  # gone: nothing to read, no error
