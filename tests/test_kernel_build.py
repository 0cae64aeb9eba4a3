"""Building the C++ CPU decode kernel: nothing on stderr, even on a CUDA build of torch without a
GPU (where torch's extension builder logs "No CUDA runtime is found" when it is imported); one
build per environment, torch version and kernel source, in its own folder; `python -m paged_kv
build` does it ahead of time, and a later process loads it without building.

The build runs in subprocesses with a fresh, temporary build folder, so this test pays for one
real build (about a minute on two cores) and never touches the environment's own folder.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A CUDA build of torch on a machine without a GPU, as torch's extension builder sees it: CUDA
# compiled in, a CUDA_HOME (set in the environment below), no device. Applied before paged_kv
# is imported, in each subprocess.
CUDA_TORCH_WITHOUT_GPU = """
import torch
torch.cuda._is_compiled = lambda: True
torch.version.cuda = "12.8"
torch.cuda.is_available = lambda: False
"""

# What a notebook cell does: the first fp32 CPU `paged_decode` (builds the kernel if needed).
USE_THE_KERNEL = (
    CUDA_TORCH_WITHOUT_GPU
    + """
import sys
from paged_kv.attention import cpu_decode, paged_decode, reference_decode
from paged_kv.attention.testing import random_paged_batch

q, k, v, tables, lens, _ = random_paged_batch(torch.Generator().manual_seed(0), 3, 16, 2, 2, 64)
out = paged_decode(q, k, v, tables, lens)
assert cpu_decode.handles(q, k, v), "the C++ kernel is not in use"
assert torch.allclose(out, reference_decode(q, k, v, tables, lens), rtol=1e-5, atol=1e-5)
print("imported torch's extension builder:", "torch.utils.cpp_extension" in sys.modules)
"""
)

# `python -m paged_kv build` in the same simulated environment.
BUILD_COMMAND = (
    CUDA_TORCH_WITHOUT_GPU
    + """
import runpy, sys
sys.argv = ["python -m paged_kv", "build"]
runpy.run_module("paged_kv", run_name="__main__", alter_sys=True)
"""
)


def run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture
def cuda_looking_env(tmp_path):
    """A CUDA_HOME that exists (no GPU behind it) and fresh, empty build folders."""
    (tmp_path / "cuda").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "MAX_JOBS")}
    env.update(
        CUDA_HOME=str(tmp_path / "cuda"),
        TORCH_EXTENSIONS_DIR=str(tmp_path / "torch_extensions"),  # where torch builds by default
        PAGED_KV_BUILD_DIR=str(tmp_path / "paged_kv_build"),
    )
    return env


def test_the_kernel_builds_silently_once_and_later_processes_just_load_it(
    cuda_looking_env, tmp_path
):
    first = run(USE_THE_KERNEL, cuda_looking_env)
    assert first.returncode == 0, first.stderr
    # A notebook cell's stderr: nbval fails a checked cell on any output there.
    assert first.stderr == "", f"the kernel build wrote to stderr:\n{first.stderr}"
    notice, *rest = first.stdout.splitlines()
    assert "building the C++ CPU decode kernel" in notice and "python -m paged_kv build" in notice
    assert rest == ["imported torch's extension builder: True"]

    # The build is in the folder named by PAGED_KV_BUILD_DIR, under this environment's key.
    built = list((tmp_path / "paged_kv_build").glob("*/paged_kv_cpu_decode*.so"))
    assert len(built) == 1, sorted((tmp_path / "paged_kv_build").rglob("*"))

    again = run(BUILD_COMMAND, cuda_looking_env)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert "already built" in again.stdout and str(built[0].parent) in again.stdout

    # A later process (another notebook's kernel) loads the build: no notice, no rebuild, and
    # torch's extension builder is not even imported.
    later = run(USE_THE_KERNEL, cuda_looking_env)
    assert later.returncode == 0 and later.stderr == "", later.stderr
    assert later.stdout.splitlines() == ["imported torch's extension builder: False"]


def test_a_build_in_this_process_leaves_its_folder_where_it_was(tmp_path, monkeypatch):
    """torch's `load` appends its libraries to the flag lists it is given; were they the ones
    that key `build_dir()`, the process that built the kernel (a test session) would look for
    it in another folder, build it again and load a second copy, which aborts the process."""
    import torch.utils.cpp_extension as extension

    from paged_kv.attention import cpu_decode

    def load_as_torch_does(*, extra_cflags, extra_ldflags, build_directory, **kwargs):
        extra_cflags.append("-DTORCH_EXTENSION_NAME=x")
        extra_ldflags += ["-L/torch/lib", "-ltorch"]
        library = Path(build_directory) / "paged_kv_cpu_decode.so"
        library.write_bytes(b"")  # a stand-in: nothing here loads it
        return str(library)

    monkeypatch.setenv("PAGED_KV_BUILD_DIR", str(tmp_path))
    monkeypatch.setattr(extension, "load", load_as_torch_does)
    before = cpu_decode.build_dir()
    library = cpu_decode.build()
    assert cpu_decode.build_dir() == before
    assert cpu_decode.built_library() == library == before / "paged_kv_cpu_decode.so"


def test_a_damaged_library_is_built_again_never_loaded(tmp_path, monkeypatch):
    """A library truncated (or changed) since its build would end the process with SIGBUS when
    it is mapped: `built.txt` records its size and SHA-256, a library that no longer has them
    (or a record from before, with its name only) is not used, and the next build removes it
    first, since ninja, seeing it newer than its objects, would not link it again."""
    import torch.utils.cpp_extension as extension

    from paged_kv.attention import cpu_decode

    linked = []

    def load_as_ninja_does(*, build_directory, **kwargs):
        library = Path(build_directory) / "paged_kv_cpu_decode.so"
        if not library.exists():  # up to date otherwise: nothing is linked
            library.write_bytes(bytes(range(256)) * 40)  # a stand-in: nothing here loads it
            linked.append(library)
        return str(library)

    monkeypatch.setenv("PAGED_KV_BUILD_DIR", str(tmp_path))
    monkeypatch.setattr(extension, "load", load_as_ninja_does)
    library = cpu_decode.build()
    record = (cpu_decode.build_dir() / "built.txt").read_text().split()
    assert record[:2] == [library.name, str(10240)] and len(record[2]) == 64
    assert cpu_decode.built_library() == library and len(linked) == 1

    with library.open("r+b") as file:
        file.truncate(5000)
    assert cpu_decode.built_library() is None
    assert cpu_decode.build() == library and len(linked) == 2  # linked again, not reused
    assert library.stat().st_size == 10240 and cpu_decode.built_library() == library

    library.write_bytes(library.read_bytes()[::-1])  # same size, other bytes
    assert cpu_decode.built_library() is None
    (cpu_decode.build_dir() / "built.txt").write_text(library.name + "\n")  # the old record
    assert cpu_decode.built_library() is None
