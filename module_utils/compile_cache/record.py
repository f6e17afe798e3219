# -*- coding: utf-8 -*-
"""The home's compile-cache record, `<home>/.sglang-compile-cache.json`: {key, sha256, installed_at, files, bytes,
source}, what the home holds (installed from a bundle, or published as one); read without following a link, written
atomically.
"""
from __future__ import absolute_import, division, print_function

import datetime
import json
import os
import tempfile

RECORD_NAME = ".sglang-compile-cache.json"

def read_record(home: str) -> dict:
    """<home>/.sglang-compile-cache.json, or {} (missing, unreadable, a link, not an object)."""
    path = os.path.join(home, RECORD_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "r", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_record(home: str, record: dict) -> None:
    """Atomically (a fresh temp file in home, O_EXCL, then rename over the record: a link there is replaced, never
    followed). Root-owned, 0644."""
    fd, tmp = tempfile.mkstemp(prefix=".sglang-compile-cache.", suffix=".tmp", dir=home)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(home, RECORD_NAME))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def record_installed(home: str, key: str, sha256: str, files: int, nbytes: int) -> None:
    """An installer's record: the bundle of this key and sha256 is in the home (the same again is no change)."""
    write_record(home, {"key": key, "sha256": sha256, "installed_at": _now(), "files": files, "bytes": nbytes,
                        "source": "installed"})


def record_published(home: str, key: str, sha256: str, files: int, nbytes: int) -> None:
    """The publisher's own record: its cache is the bundle's source, so it never installs its own bundle."""
    write_record(home, {"key": key, "sha256": sha256, "installed_at": _now(), "files": files, "bytes": nbytes,
                        "source": "published"})
