"""Power loss: a FUSE pass-through filesystem under a member's data
directory that keeps every write in memory until the file is fsynced.

`python -m jepsen.powerloss BACKING MOUNT` serves BACKING at MOUNT. A
write is held per file, in order; a read sees the held writes over the
backing file; fsync (or fdatasync) applies the file's held writes to the
backing file and syncs it. Power loss is then: SIGKILL the member, SIGKILL
this process (whatever it held is gone, as a page cache is on power
loss), lazily unmount, serve the backing directory again and restart the
member on it.

Directory operations (create, rename, unlink, mkdir) reach the backing
directory at once: the model loses unsynced file data, not unsynced
directory entries (a filesystem with an ordered metadata journal comes
close to that; losing a rename that was not followed by a directory fsync
is not modelled).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import mfusepy

from .network import PREFIX

# The mounts' filesystem name, by which cleanup finds them: per network slot,
# so that one slot's cleanup leaves another's disks alone.
FSNAME = f"{PREFIX}powerloss"
MOUNT_TIMEOUT_S = 20.0
POLL_S = 0.05
COMMAND_TIMEOUT_S = 10.0


class LossyPassthrough(mfusepy.Operations):
    """The filesystem's operations (mfusepy calls them from its threads)."""

    # Times cross the interface as integer nanoseconds.
    use_ns = True

    def __init__(self, backing: str):
        self.root = backing
        self._mutex = threading.Lock()
        # path -> held operations, in order: ("w", offset, data) or ("t", length).
        self.held: dict[str, list] = {}

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _size(self, size: int, ops: list) -> int:
        for op in ops:
            size = op[1] if op[0] == "t" else max(size, op[1] + len(op[2]))
        return size

    # ----- metadata, passed through at once

    def getattr(self, path, fh=None):
        st = os.lstat(self._full(path))
        attrs = {key: getattr(st, key) for key in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        with self._mutex:
            ops = self.held.get(path)
            if ops:
                attrs["st_size"] = self._size(st.st_size, ops)
        return attrs

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._full(path))

    def mkdir(self, path, mode):
        return os.mkdir(self._full(path), mode)

    def rmdir(self, path):
        return os.rmdir(self._full(path))

    def unlink(self, path):
        with self._mutex:
            self.held.pop(path, None)
        return os.unlink(self._full(path))

    def rename(self, old, new):
        with self._mutex:
            ops = self.held.pop(old, None)
            self.held.pop(new, None)
            if ops:
                self.held[new] = ops
        return os.rename(self._full(old), self._full(new))

    def chmod(self, path, mode):
        return os.chmod(self._full(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._full(path), uid, gid)

    def utimens(self, path, times=None):
        return os.utime(self._full(path), ns=times) if times else os.utime(self._full(path))

    def statfs(self, path):
        stv = os.statvfs(self._full(path))
        return {key: getattr(stv, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                   "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def access(self, path, amode):
        if not os.access(self._full(path), amode):
            raise OSError(errno.EACCES, path)
        return 0

    # ----- files: data held until fsync

    def open(self, path, flags):
        fd = os.open(self._full(path), os.O_RDWR)
        if flags & os.O_TRUNC:
            self.truncate(path, 0)
        return fd

    def create(self, path, mode, fi=None):
        return os.open(self._full(path), os.O_RDWR | os.O_CREAT, mode)

    def truncate(self, path, length, fh=None):
        with self._mutex:
            self.held.setdefault(path, []).append(("t", length))
        return 0

    def write(self, path, data, offset, fh):
        with self._mutex:
            self.held.setdefault(path, []).append(("w", offset, bytes(data)))
        return len(data)

    def read(self, path, size, offset, fh):
        with self._mutex:
            ops = list(self.held.get(path, ()))
        window = bytearray(os.pread(fh, size, offset))
        length = os.fstat(fh).st_size
        window.extend(bytes(size - len(window)))
        for op in ops:
            if op[0] == "t":
                cut = max(0, op[1] - offset)
                if cut < size:
                    window[cut:] = bytes(size - cut)
                length = op[1]
            else:
                start, data = op[1], op[2]
                lo, hi = max(start, offset), min(start + len(data), offset + size)
                if lo < hi:
                    window[lo - offset:hi - offset] = data[lo - start:hi - start]
                length = max(length, start + len(data))
        return bytes(window[:max(0, min(size, length - offset))])

    def fsync(self, path, datasync, fh):
        with self._mutex:
            ops = self.held.pop(path, [])
            for op in ops:
                if op[0] == "t":
                    os.ftruncate(fh, op[1])
                else:
                    os.pwrite(fh, op[2], op[1])
            os.fsync(fh)
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0


# ----- driving it from the harness


def mounted(mount: Path) -> bool:
    return any(line.split()[1] == str(mount) for line in Path("/proc/mounts").read_text().splitlines())


def ours() -> list[str]:
    """Every mount point this module serves (by its filesystem name)."""
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[0] == FSNAME]


def unmount(mount: Path) -> None:
    subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=COMMAND_TIMEOUT_S)


class Disk:
    """One member's lossy disk: the backing directory and the FUSE process."""

    def __init__(self, backing: Path, mount: Path, log: Path):
        self.backing = backing
        self.mount = mount
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "jepsen.powerloss", str(self.backing),
                                             str(self.mount)], stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])),
                                            start_new_session=True)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not mounted(self.mount):
            if self.process.poll() is not None or time.monotonic() >= deadline:
                raise RuntimeError(f"the lossy filesystem did not mount at {self.mount}; see {self.log}")
            time.sleep(POLL_S)

    def lose_power(self) -> None:
        """Everything not fsynced is gone (the member must be dead already)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=COMMAND_TIMEOUT_S)
        unmount(self.mount)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            unmount(self.mount)
            try:
                self.process.wait(timeout=COMMAND_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        unmount(self.mount)


def serve(backing: str, mount: str) -> None:
    mfusepy.FUSE(LossyPassthrough(backing), mount, foreground=True, nothreads=False, fsname=FSNAME)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
