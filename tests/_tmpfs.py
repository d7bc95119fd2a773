"""A small tmpfs for tests of full and read-only file systems (needs root; skipped elsewhere)."""

import contextlib
import errno
import os
import subprocess

import pytest


@contextlib.contextmanager
def small_tmpfs(directory, size="512k"):
    """Mount a tmpfs of ``size`` on ``directory`` for the block; skip the test if we cannot."""
    os.makedirs(directory, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(directory)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


def fill(directory):
    """Write a file into ``directory`` until its file system is full."""
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as file:
        try:
            while True:
                file.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    # a few bytes may still fit in the last block: take them too
    with open(os.path.join(directory, "filler2"), "wb", buffering=0) as file:
        try:
            while True:
                file.write(b"\0")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def make_read_only(directory):
    subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)
