"""A local apt repository (a test double) for the cuda role's apt route: `python -m lab.aptrepo build|serve`.

Builds, with dpkg-deb, dpkg-scanpackages and gpg only, a signed flat repository shaped like NVIDIA's CUDA
repository (`deb [signed-by=...] URL /`) holding:

* `cuda-keyring_1.1-1_all.deb`: the repository key as /usr/share/keyrings/cuda-archive-keyring.gpg and a source
  list /etc/apt/sources.list.d/cuda-debian12-x86_64.list that points apt at this repository's URL;
* `cuda-toolkit-13-0` in two versions (13.0.2-1 and a newer 13.0.3-1, so a pin has something to hold back):
  /usr/local/cuda-13.0/bin/nvcc is a shell script that prints a CUDA 13.0 `nvcc --version`.

Serves it over HTTP on a given address (the lab bridge gateway) from a thread. Never imported by roles.
"""
from .repo import AptRepo, build_repo, TOOLKIT_VERSIONS

__all__ = ["AptRepo", "build_repo", "TOOLKIT_VERSIONS"]
