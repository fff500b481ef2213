"""Test helpers: throw-away network namespaces and running code inside one."""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=check)


@contextmanager
def inside(netns: str) -> Iterator[None]:
    """Run the block (this thread) in network namespace ``netns``, then come back."""
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    there = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
        try:
            yield
        finally:
            if _libc.setns(here, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(here)
        os.close(there)


def mac_of(netns: str, ifname: str) -> bytes:
    text = sh("ip", "-n", netns, "-o", "link", "show", "dev", ifname).stdout
    return bytes.fromhex(text.split("link/ether ")[1].split()[0].replace(":", ""))
