#!/usr/bin/env python3
"""The real SGLang parser's verdict (argparse stage only) on a corpus of argvs.

    python sglang_parser_verdicts.py --module sglang.srt.server_args --corpus corpus.json --out verdicts.json

Run it with the python of the venv whose SGLang is asked (stdlib only here). corpus.json is {"name": [argv
words...]}; for each argv the parser is built the way that version's `prepare_server_args` builds it (see
sglang_schema_extract.build_parser; the stand-in's `make_parser()`), `parse_args(argv)` runs with stderr captured,
SystemExit is caught, and the verdict is {"accepted": bool, "rc": 0|2, "message": argparse's error line or ""}.
Nothing after argparse runs (no __post_init__, no resolve_once, no model config read), and CUDA_VISIBLE_DEVICES
is emptied before anything is imported. Output: {"sglang_version", "module", "verdicts": {name: verdict}}, sorted
keys, indent 1.
"""
from __future__ import annotations

import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before any import that could initialise CUDA

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def _extractor():
    spec = importlib.util.spec_from_file_location("_sglang_schema_extract", os.path.join(_HERE, "schema_extract.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _error_line(stderr: str) -> str:
    """argparse's message: the last line of its output, "<prog>: error: <message>" -> "<message>"."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if ": error: " in line:
            return line.split(": error: ", 1)[1].strip()
    return lines[-1].strip() if lines else ""


def verdict(parser_factory, argv) -> dict:
    parser = parser_factory()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args([str(w) for w in argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        return {"accepted": code == 0, "rc": code, "message": _error_line(err.getvalue()) if code else ""}
    return {"accepted": True, "rc": 0, "message": ""}


def run(module_name: str, corpus: dict) -> dict:
    extract = _extractor()
    module = importlib.import_module(module_name)
    dist, dist_version = extract._distribution_of(module_name)
    out = {}
    for name in sorted(corpus):
        argv = corpus[name]
        if not isinstance(argv, list):
            raise SystemExit(f"corpus entry {name!r} is not a list of argv words")
        out[name] = verdict(lambda: extract.build_parser(module), argv)
    return {
        "sglang_version": extract.package_version(module, module_name, dist_version),
        "module": module_name,
        "python": "%d.%d.%d" % sys.version_info[:3],
        "verdicts": out,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", default="sglang.srt.server_args")
    ap.add_argument("--corpus", required=True, help='JSON file: {"name": [argv words...]}')
    ap.add_argument("--out", help="write here (default: stdout)")
    args = ap.parse_args(argv)
    corpus = json.loads(Path(args.corpus).read_text(encoding="utf-8"))
    extractor = _extractor()
    extractor.emit(extractor.dumps(run(args.module, corpus)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
