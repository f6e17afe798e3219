#!/usr/bin/env bash
# Generate the full lock of venv flavours from their top-level pins (roles/venv/files/locks/README.md).
#
#   roles/venv/files/locks/lock.sh [FLAVOUR ...]        default: every requirements/<flavour>.txt
#
# For each flavour: requirements/<flavour>.txt (the input) -> locks/<flavour>.txt (the lock): every package, one exact
# version, the sha256 of every file of that release on the index (uv pip compile --universal --generate-hashes,
# markers for every platform), then a proof that each target below finds a wheel for every line that applies to it
# (the venv installs with --only-binary :all:, so a target without one would fail on the host). Nothing is written
# when resolution or a proof fails.
#
# Environment:
#   UV                   uv binary to use (default: uv==$UV_VERSION from PyPI in a throwaway venv under $TMPDIR)
#   LOCK_INDEX_URL       the index (default https://pypi.org/simple)
#   LOCK_TORCH_BACKEND   e.g. cu130: torch, torchvision, torchaudio, triton from the PyTorch index of that backend
#                        (uv --torch-backend), the rest from LOCK_INDEX_URL; the lock then carries the index's
#                        --extra-index-url line, so the host's pip finds those files (their hashes are in the lock)
#   LOCK_PYTHON          lowest CPython the lock serves (default 3.11; the universal resolution covers newer ones)
#   LOCK_TARGETS         "platform:python ..." proven installable (uv --python-platform values)
#   LOCK_WHEELHOUSE      a directory of wheels: lock exactly those files instead of resolving against an index
#                        (a flavour whose wheels are not PyPI's bytes, e.g. image-torch-0511's trimmed sgl_kernel):
#                        one line per wheel, name==version with the sha256 of that file; every name==version pin of
#                        the input must have its wheel there and every wheel must be a pin (the input is the one list).
#                        The resolver header says "wheelhouse" and the CPython of the wheels' cpXY tags (else
#                        LOCK_PYTHON). No uv, no index.
set -euo pipefail

UV_VERSION=0.13.9
here=$(cd "$(dirname "$0")" && pwd)
files=$(dirname "$here")
index=${LOCK_INDEX_URL:-https://pypi.org/simple}
backend=${LOCK_TORCH_BACKEND:-}
python=${LOCK_PYTHON:-3.11}
# Debian 12 (glibc 2.36, CPython 3.11) and Ubuntu 24.04 (glibc 2.39, CPython 3.12), x86_64 and aarch64
targets=${LOCK_TARGETS:-"x86_64-manylinux_2_36:3.11 aarch64-manylinux_2_36:3.11 x86_64-manylinux_2_39:3.12 aarch64-manylinux_2_39:3.12"}

work=$(mktemp -d "${TMPDIR:-/tmp}/venv-lock.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -n "${LOCK_WHEELHOUSE:-}" ]; then
    [ $# -ge 1 ] || { echo "lock.sh: LOCK_WHEELHOUSE needs the flavour(s) to lock" >&2; exit 2; }
    for flavour in "$@"; do
        input=requirements/$flavour.txt
        [ -f "$files/$input" ] || { echo "lock.sh: no $files/$input" >&2; exit 2; }
        python3 - "$LOCK_WHEELHOUSE" "$files" "$input" "$flavour" "${LOCK_PYTHON:-}" > "$work/$flavour.txt" <<'PY'
import hashlib, os, re, sys
wheelhouse, files, input_path, flavour, python = sys.argv[1:]
canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()
pins = {}
for line in open(os.path.join(files, input_path), encoding="utf-8"):
    m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;#]+)$", line.strip())
    if m:
        pins[canon(m.group(1))] = m.group(2)
wheels, tags = {}, set()
for name in sorted(os.listdir(wheelhouse)):
    m = re.match(r"^([^-]+)-([^-]+)(?:-\d[^-]*)?-([^-]+)-[^-]+-[^-]+\.whl$", name)
    if not m:
        continue
    key = canon(m.group(1))
    if key in wheels:
        sys.exit(f"lock.sh: {wheelhouse} has two wheels of {key}: {wheels[key][1]}, {name} (one file a package)")
    with open(os.path.join(wheelhouse, name), "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    wheels[key] = (m.group(2), name, digest)
    tags.update(re.findall(r"cp3(\d+)", m.group(3)))
problems = [f"no wheel of {n}=={v}" for n, v in sorted(pins.items()) if n not in wheels]
problems += [f"{w[1]} is not the pin {n}=={pins[n]}" for n, w in sorted(wheels.items()) if n in pins and w[0] != pins[n]]
problems += [f"{w[1]} is not a pin of {input_path}" for n, w in sorted(wheels.items()) if n not in pins]
if problems or not pins:
    sys.exit(f"lock.sh: {flavour}: {wheelhouse} does not hold exactly the pins of {input_path}: "
             + ("; ".join(problems) or "the input pins nothing"))
python = python or (f"3.{max(int(t) for t in tags)}" if tags else "3.11")
with open(os.path.join(files, input_path), "rb") as fh:
    input_sha = hashlib.sha256(fh.read()).hexdigest()
print(f"# Full lock of the {flavour} venv flavour: every package pip installs into the venv, one exact version, the sha256")
print("# of the one wheel of it in the flavour's wheelhouse. Installed with pip install --require-hashes --no-deps")
print("# --only-binary :all: (with venv_wheelhouse: --no-index --find-links). Generated, never edited by hand:")
print(f"#     LOCK_WHEELHOUSE=<the wheels> roles/venv/files/locks/lock.sh {flavour}")
print(f"# input: {input_path} sha256={input_sha}")
print(f"# resolver: wheelhouse (one line per wheel file: name==version, --hash of that file) --python-version {python},")
print(f"#   {len(wheels)} wheels")
for key, (version, name, digest) in sorted(wheels.items()):
    print(f"{key}=={version} \\\n    --hash=sha256:{digest}\n    # {name}")
PY
        mv "$work/$flavour.txt" "$here/$flavour.txt"
        echo "lock.sh: $here/$flavour.txt: $(grep -c '^[A-Za-z0-9]' "$here/$flavour.txt") packages (wheelhouse)"
    done
    exit 0
fi

uv=${UV:-}
if [ -z "$uv" ]; then
    python3 -m venv "$work/uv"
    "$work/uv/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
    uv=$work/uv/bin/uv
fi
uv_version=$("$uv" --version | awk '{print $2}')

if [ $# -eq 0 ]; then
    set -- $(cd "$files/requirements" && ls -- *.txt | sed 's/\.txt$//')
fi

common=(--no-config --index-url "$index" --quiet)
[ -n "$backend" ] && common+=(--torch-backend "$backend")

for flavour in "$@"; do
    input=requirements/$flavour.txt
    [ -f "$files/$input" ] || { echo "lock.sh: no $files/$input" >&2; exit 2; }
    body=$work/$flavour.body
    # relative input path: the "# via -r requirements/<flavour>.txt" annotations name no machine's directory
    (cd "$files" && "$uv" pip compile "${common[@]}" --universal --generate-hashes --python-version "$python" \
        --no-header "$input" -o "$body")
    for target in $targets; do
        platform=${target%%:*}
        version=${target##*:}
        if ! "$uv" pip compile "${common[@]}" --no-deps --only-binary :all: --python-platform "$platform" \
                --python-version "$version" "$body" -o /dev/null; then
            echo "lock.sh: $flavour: the lock has no wheel on $platform for CPython $version (see above)" >&2
            exit 1
        fi
    done
    out=$work/$flavour.txt
    {
        echo "# Full lock of the $flavour venv flavour: every package pip installs, one exact version, the sha256 of every"
        echo "# file of that release on the index. Installed with pip install --require-hashes --no-deps --only-binary"
        echo "# :all: (nothing outside this file can enter; nothing is built). Generated, never edited by hand:"
        echo "#     roles/venv/files/locks/lock.sh $flavour${backend:+   (LOCK_TORCH_BACKEND=$backend)}"
        echo "# input: $input sha256=$(sha256sum "$files/$input" | awk '{print $1}')"
        echo "# resolver: uv $uv_version pip compile --universal --generate-hashes --python-version $python,"
        echo "#   index $index${backend:+, torch backend $backend}"
        echo "# proven installable from wheels on: $targets"
        if grep -q '^torch==' "$body"; then
            torch=$(sed -n 's/^torch==\([^ ;]*\).*/\1/p' "$body" | head -n1)
            if [ -n "$backend" ]; then
                echo "# torch: $torch, the $backend build, with the hashes of the PyTorch index's own files."
            else
                echo "# torch: $torch as PyPI has it (its Linux wheels are CUDA 13 builds: see the nvidia-* lines). The"
                echo "#   +cu130 build of the PyTorch index (download.pytorch.org/whl/cu130) was not reachable where this"
                echo "#   lock was made. For it, an operator re-locks on a machine that reaches that index:"
                echo "#       LOCK_TORCH_BACKEND=cu130 roles/venv/files/locks/lock.sh $flavour"
                echo "#   which takes torch, torchvision, torchaudio and triton (and their hashes) from that index and"
                echo "#   adds its --extra-index-url line here; no venv_pip_args are needed (roles/venv/files/locks/README.md)."
            fi
        fi
        if [ -n "$backend" ]; then
            echo "--extra-index-url https://download.pytorch.org/whl/$backend"
        fi
        cat "$body"
    } > "$out"
    mv "$out" "$here/$flavour.txt"
    echo "lock.sh: $here/$flavour.txt: $(grep -c '^[A-Za-z0-9]' "$here/$flavour.txt") packages"
done
