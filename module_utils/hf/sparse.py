# -*- coding: utf-8 -*-
"""The partial file's sparse map: which byte ranges are written and which are holes, and pushing written pages to disk.

A file is built sparse (created empty, written at chunk offsets), so every region not yet written is a hole:
SEEK_DATA / SEEK_HOLE are the transfer's bookkeeping (see module_utils/hf/file_task.py). Ranges are inclusive.
"""
from __future__ import absolute_import, division, print_function

import errno
import os

MiB = 1 << 20

_SYNC_FILE_RANGE = []


def start_writeback(fd):
    """Start writing the file's dirty pages to disk now, without waiting (sync_file_range SYNC_FILE_RANGE_WRITE):
    the fsync before a file is vouched for then finds little left to write. False where unsupported."""
    if not _SYNC_FILE_RANGE:
        try:
            import ctypes
            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            _SYNC_FILE_RANGE.append(fn)
        except (OSError, AttributeError):
            _SYNC_FILE_RANGE.append(None)
    fn = _SYNC_FILE_RANGE[0]
    return fn is not None and fn(fd, 0, 0, 2) == 0  # 2 = SYNC_FILE_RANGE_WRITE; offset 0, nbytes 0 = whole file


def has_hole(fd, start, end):
    """True when [start, end] (inclusive) of the file is not entirely written (a hole, or beyond EOF)."""
    try:
        return os.lseek(fd, start, os.SEEK_HOLE) <= end
    except OSError as err:
        if err.errno == errno.ENXIO:
            return True
        raise


def data_bytes(fd, size):
    """Bytes of [0, size) that are written (not holes)."""
    total, pos = 0, 0
    while pos < size:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as err:
            if err.errno == errno.ENXIO:
                break
            raise
        if d >= size:
            break
        h = min(os.lseek(fd, d, os.SEEK_HOLE), size)
        total += h - d
        pos = h
    return total


def sparse_supported(directory):
    """Does this filesystem report holes? (Without it resume cannot tell written chunks from holes.)"""
    path = os.path.join(directory, ".sparse-probe.%d" % os.getpid())
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, 8 * MiB)
            os.pwrite(fd, b"x" * 4096, 4 * MiB)
            return os.lseek(fd, 0, os.SEEK_DATA) >= MiB
        finally:
            os.close(fd)
            os.unlink(path)
    except OSError:
        return False


def hole_map(fd, a, b):
    """Split [a, b] into (start, end, is_hole) pieces (inclusive ends)."""
    out = []
    pos = a
    while pos <= b:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as err:
            if err.errno != errno.ENXIO:
                raise
            d = b + 1
        if d > pos:
            out.append((pos, min(d, b + 1) - 1, True))
            pos = min(d, b + 1)
            continue
        hend = min(os.lseek(fd, pos, os.SEEK_HOLE), b + 1)
        out.append((pos, hend - 1, False))
        pos = hend
    return out


def holes(fd, size):
    """[(start, end)] (inclusive) of every hole in [0, size) (beyond EOF counts as a hole)."""
    if size <= 0:
        return []
    return [(s, e) for s, e, hole in hole_map(fd, 0, size - 1) if hole]
