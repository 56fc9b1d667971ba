# expect: not_promoted
# dynamic: not_promoted
# family: import_patch
"""Inflates the round trip the harness subtracts: patches its own sandbox server (reached from a string
annotation) so that a Calls command with no calls, which is how a harness measures the fixed cost of a
sample, sleeps 3 ms first. Subtracted from this side's timed samples alone, that cost would turn an
honest kernel into a huge "win"; both sides get the same, smaller overhead taken off instead."""
# ruff: noqa  (string annotations are code here)
import typing

import torch

SLOT = "silu_mul"
BACKEND = "torch"


def _Server(
    server: "__import__('services.engine_host.sandbox_server', fromlist=['SandboxServer']).SandboxServer",
    sleep: "__import__('time').sleep",
):
    pass  # only its annotations matter


_HINTS = typing.get_type_hints(_Server)
_SERVER, _SLEEP = _HINTS["server"], _HINTS["sleep"]
_CALLS = _SERVER.calls


def _slow_when_empty(self, cmd):
    if not cmd.calls:
        _SLEEP(0.003)
    return _CALLS(self, cmd)


[_SERVER][0].calls = _slow_when_empty


def kernel(gate, up):
    return gate * torch.sigmoid(gate) * up
