"""A local apt repository (a test double) for the cuda role's apt route: `python -m lab.aptrepo build|serve`.

Builds, with dpkg-deb, dpkg-scanpackages and gpg only, signed flat repositories laid out like NVIDIA's CUDA
repositories: one per supported `<distro><release>/<arch>/` (module_utils/gpu/cuda_repo.py: debian12, ubuntu2204,
ubuntu2404 x x86_64, sbsa), each `deb [signed-by=...] URL /`, plus one at the root (a mirror of
debian12/<this machine's arch>/ at a URL of its own). Every repository holds, for its architecture (x86_64: amd64,
sbsa: arm64):

* `cuda-keyring_1.1-1_all.deb`: the repository key as /usr/share/keyrings/cuda-archive-keyring.gpg and a source
  list /etc/apt/sources.list.d/cuda-<distro><release>-<arch>.list naming that repository's own URL, as NVIDIA's do;
* the meta package `cuda-toolkit-13-0` in two versions (13.0.2-1 and a newer 13.0.3-1, so a pin has something to
  hold back), depending with `>=` on three components, each in two versions (the one CUDA 13.0.2 ships and a newer
  decoy): `cuda-nvcc-13-0` (/usr/local/cuda-13.0/bin/nvcc, a shell script printing a CUDA 13.0 `nvcc --version`
  whose build is the package's version: V13.0.88 pinned, V13.0.96 decoy), `cuda-cudart-13-0`, `libcublas-13-0`.

Serves it over HTTP on a given address (the lab bridge gateway) from a thread, recording every request. Never
imported by roles.
"""
from .repo import AptRepo, build_repo, COMPONENTS, DECOY_COMPONENTS, PINNED_COMPONENTS, TOOLKIT_VERSIONS

__all__ = ["AptRepo", "build_repo", "COMPONENTS", "DECOY_COMPONENTS", "PINNED_COMPONENTS", "TOOLKIT_VERSIONS"]
