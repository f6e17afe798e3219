#!/usr/bin/env python3
"""Print, as JSON, the OpenPGP v4 fingerprints of the primary keys in a keyring file (binary or ASCII-armored).

Usage: openpgp_fingerprints.py KEYRING            a keyring file
       openpgp_fingerprints.py DEB MEMBER         MEMBER (e.g. ./usr/share/keyrings/x.gpg) inside a .deb, read with
                                                  dpkg-deb without installing anything
Stdlib only (the hosts have gpgv but not gpg). A v4 fingerprint is SHA-1 over 0x99, the two-byte length of the
public-key packet body, and the body (RFC 4880 section 12.2).
"""
import base64
import hashlib
import io
import json
import subprocess
import sys
import tarfile


def dearmor(data):
    if not data.lstrip().startswith(b"-----BEGIN PGP"):
        return data
    lines = data.decode("ascii", "replace").splitlines()
    body, started = [], False
    for line in lines:
        if line.startswith("-----BEGIN"):
            started = None  # headers follow until the first blank line
            continue
        if started is None:
            if not line.strip():
                started = True
            elif ":" not in line:
                started = True
                body.append(line.strip())
            continue
        if started:
            if line.startswith("=") or line.startswith("-----END"):
                break
            body.append(line.strip())
    return base64.b64decode("".join(body))


def packets(data):
    pos = 0
    while pos < len(data):
        tag_byte = data[pos]
        pos += 1
        if not tag_byte & 0x80:
            raise ValueError("not an OpenPGP packet at offset %d" % (pos - 1))
        if tag_byte & 0x40:  # new format
            tag = tag_byte & 0x3F
            first = data[pos]
            if first < 192:
                length, pos = first, pos + 1
            elif first < 224:
                length, pos = ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif first == 255:
                length, pos = int.from_bytes(data[pos + 1:pos + 5], "big"), pos + 5
            else:
                raise ValueError("partial body lengths are not used by key packets")
        else:  # old format
            tag = (tag_byte >> 2) & 0x0F
            size = {0: 1, 1: 2, 2: 4}.get(tag_byte & 0x03)
            if size is None:
                raise ValueError("indeterminate old-format length")
            length, pos = int.from_bytes(data[pos:pos + size], "big"), pos + size
        yield tag, data[pos:pos + length]
        pos += length


def fingerprints(data):
    out = []
    for tag, body in packets(dearmor(data)):
        if tag == 6:  # public key (primary)
            if body[0] != 4:
                out.append("unsupported-v%d" % body[0])
            else:
                out.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())
    return out


def read_member(deb, member):
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        for name in (member, "./" + member.lstrip("./"), member.lstrip("./")):
            try:
                return tf.extractfile(name).read()
            except KeyError:
                continue
    raise SystemExit(json.dumps({"error": "%s not in %s" % (member, deb)}))


def main(argv):
    data = read_member(argv[1], argv[2]) if len(argv) == 3 else open(argv[1], "rb").read()
    print(json.dumps({"fingerprints": fingerprints(data)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
