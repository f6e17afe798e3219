"""ansible.module_utils.venv.wheelhouse: the preflight of an offline build - a wheel with the lock's bytes for every lock
line that applies to the host (markers evaluated for the host's python), refused naming what is missing or other."""
import hashlib

import pytest

from ansible.module_utils.venv import lock as vl
from ansible.module_utils.venv import wheelhouse as wh
from ansible.module_utils.venv.build_error import BuildError

ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "os_name": "posix", "sys_platform": "linux",
       "platform_machine": "x86_64", "platform_system": "Linux", "platform_release": "6.8",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def wheel(d, name, version, data=b"wheel"):
    path = d / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    path.write_bytes(data + name.encode())
    return path


def lock_of(*lines):
    return vl.parse("\n".join(lines) + "\n")


def line(path, name, version, marker=""):
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return f"{name}=={version}{' ; ' + marker if marker else ''} --hash=sha256:{digest}"


def test_pip_args_contact_no_index():
    assert wh.pip_args("/srv/wh") == ["--no-index", "--find-links", "/srv/wh"]
    assert wh.pip_args("") == []


@pytest.mark.parametrize("marker, applies", [
    ("", True),
    ("python_full_version < '3.13'", True),
    ("python_full_version >= '3.13'", False),
    ("python_version == '3.12' and sys_platform == 'linux'", True),
    ("sys_platform == 'darwin' or (platform_machine == 'x86_64' and python_version >= '3.11')", True),
    ("platform_machine == 'aarch64' or platform_machine == 'arm64'", False),
    ("sys_platform != 'linux' or (sys_platform == 'linux' and platform_machine != 'aarch64')", True),
    ("'linux' in sys_platform", True),
    ("python_version >= '3.10'", True),   # numeric, not string order ('3.10' < '3.9' as strings)
])
def test_markers_evaluate_for_the_hosts_python(marker, applies):
    assert wh.marker_applies(marker, ENV) is applies


@pytest.mark.parametrize("marker", ["python_version ~= '3.12'", "frobnicate == '1'", "(python_version == '3.12'"])
def test_a_marker_it_cannot_read_is_refused_never_guessed(marker):
    with pytest.raises(BuildError):
        wh.marker_applies(marker, ENV)


def test_a_full_wheelhouse_passes_and_lines_for_other_hosts_are_skipped(tmp_path):
    six = wheel(tmp_path, "six", "1.17.0")
    core = wheel(tmp_path, "pydantic-core", "2.46.4")
    (tmp_path / "README").write_text("not a wheel")
    lock = lock_of(line(six, "six", "1.17.0"), line(core, "pydantic-core", "2.46.4"),
                   "numpy==2.4.0 ; python_full_version >= '3.13' --hash=sha256:" + "1" * 64)
    assert wh.check(str(tmp_path), lock, ENV) == {"wheels": 2, "needed": 2,
                                                  "skipped": ["numpy==2.4.0 ; python_full_version >= '3.13'"]}


def test_a_missing_wheelhouse_or_missing_wheels_are_refused_naming_the_packages(tmp_path):
    six = wheel(tmp_path, "six", "1.17.0")
    lock = lock_of(line(six, "six", "1.17.0"), "idna==3.10 --hash=sha256:" + "2" * 64,
                   "sglang-kernel==0.4.2 ; sys_platform == 'linux' --hash=sha256:" + "3" * 64)
    with pytest.raises(BuildError, match=r"does not exist on the host"):
        wh.check(str(tmp_path / "absent"), lock, ENV)
    with pytest.raises(BuildError, match="absolute"):
        wh.check("relative/dir", lock, ENV)
    with pytest.raises(BuildError) as err:
        wh.check(str(tmp_path), lock, ENV)
    assert "no wheel for 2 lock line(s) that apply to this host: idna==3.10, sglang-kernel==0.4.2" in str(err.value)
    assert "Nothing was changed" in str(err.value)


def test_a_wheel_with_other_bytes_than_the_locks_is_refused_naming_the_file(tmp_path):
    six = wheel(tmp_path, "six", "1.17.0")
    lock = lock_of(line(six, "six", "1.17.0"))
    six.write_bytes(b"substituted")
    with pytest.raises(BuildError) as err:
        wh.check(str(tmp_path), lock, ENV)
    assert "wheel(s) with other bytes than the lock's: six-1.17.0-py3-none-any.whl (sha256" in str(err.value)
    assert "not in the lock's hashes of six==1.17.0" in str(err.value)


def test_wheel_file_names_are_read_as_pep_427_names():
    assert wh.WHEEL_RE.match("sglang_kernel-0.4.2-cp310-abi3-manylinux2014_x86_64.whl").group("name", "version") == \
        ("sglang_kernel", "0.4.2")
    assert wh.WHEEL_RE.match("pkg-1.0-1build-py3-none-any.whl").group("version") == "1.0"
    assert wh.WHEEL_RE.match("pkg-1.0.tar.gz") is None
