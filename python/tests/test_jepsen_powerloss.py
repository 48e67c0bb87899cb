"""The Jepsen harness's lossy disk (python/jepsen/powerloss.py): a real
FUSE mount; what was fsynced survives a power loss, what was not is gone,
and until then reads see the writes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

if os.geteuid() != 0 or not Path("/dev/fuse").exists() or not shutil.which("fusermount3"):
    pytest.skip("needs root, /dev/fuse and fuse3 (scripts/setup.sh --with-fault-tools)", allow_module_level=True)

from jepsen.powerloss import Disk, mounted  # noqa: E402


@pytest.fixture
def disk(tmp_path):
    lossy = Disk(tmp_path / "backing", tmp_path / "mnt", tmp_path / "fuse.log")
    lossy.start()
    yield lossy
    lossy.stop()


def power_cycle(disk: Disk) -> None:
    disk.lose_power()
    assert not mounted(disk.mount)
    disk.start()


def test_unsynced_data_is_lost_and_synced_data_survives(disk):
    synced, unsynced = disk.mount / "synced", disk.mount / "unsynced"
    with open(synced, "wb") as out:
        out.write(b"durable")
        out.flush()
        os.fsync(out.fileno())
    with open(unsynced, "wb") as out:
        out.write(b"volatile")
    assert unsynced.read_bytes() == b"volatile"
    assert (disk.backing / "unsynced").read_bytes() == b""
    power_cycle(disk)
    assert synced.read_bytes() == b"durable"
    # The directory entry survives (created at once); its data does not.
    assert unsynced.read_bytes() == b""


def test_reads_replay_held_truncates_and_writes_in_order(disk):
    path = disk.mount / "f"
    with open(path, "wb") as out:
        out.write(b"0123456789")
        out.flush()
        os.fsync(out.fileno())
    with open(path, "r+b") as out:
        out.truncate(4)
        out.seek(8)
        out.write(b"zz")
    assert path.read_bytes() == b"0123\0\0\0\0zz"
    assert path.stat().st_size == 10
    power_cycle(disk)
    assert path.read_bytes() == b"0123456789"


def test_rename_carries_held_writes_and_fsync_after_it_lands_them(disk):
    with open(disk.mount / "tmp", "wb") as out:
        out.write(b"renamed")
    os.rename(disk.mount / "tmp", disk.mount / "final")
    with open(disk.mount / "final", "r+b") as out:
        os.fsync(out.fileno())
    power_cycle(disk)
    assert (disk.mount / "final").read_bytes() == b"renamed"
    assert not (disk.mount / "tmp").exists()
