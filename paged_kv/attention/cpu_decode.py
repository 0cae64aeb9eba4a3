"""A fused paged decode kernel for CPU, in C++: K/V are read in place through the block table.

A block of the cache is `block_size` whole token rows (every KV head), one contiguous stretch, so
the kernel walks each block row by row, in memory order, scoring each key against all the query
heads that share it and keeping a running max and sum per query head (online softmax). Reading
one head's slice of every row instead (512 bytes every 4 KB at 8 heads x 128) ran up to 1.5x
slower than SDPA on contiguous K/V (batch 16 x 1k tokens). The work is cut into pieces (a
sequence's run of blocks), a few per thread, so one long sequence still keeps every core busy;
a sequence's pieces are merged by their running maxima (log-sum-exp). No gather copy is made.
It covers fp32 on CPU with head_dim a multiple of 16; `paged_decode` uses the torch reference
otherwise, and whenever the build fails (no compiler).

The build happens once per environment and torch version, into `build_dir()`: `python -m
paged_kv build` does it, and so does the test session's start (tests/conftest.py), so that no
notebook cell pays for it or times out; a process that finds no build makes one on first use,
with a one-line notice on stdout. Nothing is written to stderr unless the build fails (see
`_quiet_torch_builder`). It takes about 10 s of compiler time (13-42 s measured on 2 shared,
busy cores), because the source includes only the ATen headers it uses and registers a torch
operator; with <torch/extension.h> and pybind11 it took ~30 s of compiler time (70-100 s).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import torch

from paged_kv.attention.checks import check_decode_args
from paged_kv.attention.cpu_decode_cpp import SOURCE

LANES = 16  # floats per vector in the kernel; head_dim must be a multiple of it


NAME = "paged_kv_cpu_decode"
CFLAGS = ("-O3", "-fopenmp")
LDFLAGS = ("-fopenmp",)  # tuples: torch's `load` appends to the lists it is given
_BUILT = "built.txt"  # written last: the library, whole, with its size and SHA-256


class BuildError(RuntimeError):
    """The kernel did not build: `cause` is the compiler's (or torch's) first error line, and
    `log` the file holding the whole output."""

    def __init__(self, cause: str, log: Path | None):
        super().__init__(cause if log is None else f"{cause} (full log: {log})")
        self.cause, self.log = cause, log


def build_dir() -> Path:
    """This environment's folder for the kernel.

    One folder per Python environment (`sys.prefix`), Python, torch build and kernel source,
    named `cpu_decode-py<version>-torch<version>-<hash of all four>`, under $PAGED_KV_BUILD_DIR,
    else $XDG_CACHE_HOME/paged_kv, else ~/.cache/paged_kv. Two environments never rebuild each
    other's kernel; a new torch or a changed kernel gets a new folder.
    """
    root = os.environ.get("PAGED_KV_BUILD_DIR")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "paged_kv"
    key = [os.path.realpath(sys.prefix), sys.version, torch.__version__]
    key += [str(torch.version.git_version), str(torch.version.cuda), SOURCE, *CFLAGS, *LDFLAGS]
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:12]
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(root) / f"cpu_decode-{python}-torch{torch.__version__}-{digest}"


def built_library() -> Path | None:
    """The library a finished build left in `build_dir()`, or None: `built.txt` names it with
    its size and SHA-256, and the file must be a regular file that still has both (a truncated
    library would end the process with SIGBUS when it is mapped; a build folder from before
    the record, or copied or damaged since, is built again)."""
    folder = build_dir()
    try:
        with open(folder / _BUILT, "rb") as record:
            name, size, digest = record.read(4096).decode().split()
        library = folder / name
        if library.parent != folder or not stat.S_ISREG(library.lstat().st_mode):
            return None
        return library if _fingerprint(library) == (int(size), digest) else None
    except (OSError, ValueError):  # no record, an older one, a damaged one: build again
        return None


def _fingerprint(library: Path) -> tuple[int, str]:
    """The size and SHA-256 of `library`."""
    digest, size = hashlib.sha256(), 0
    with open(library, "rb") as file:
        while chunk := file.read(1 << 20):  # hashlib.file_digest is Python 3.11+
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


@contextlib.contextmanager
def _quiet_torch_builder() -> Iterator[list[str]]:
    """Holds back what torch's extension builder logs or warns, and yields it as a list of lines.

    torch logs to stderr, where a notebook cell shows it and nbval fails the cell: importing
    `torch.utils.cpp_extension` on a CUDA build of torch without a GPU logs "No CUDA runtime is
    found, using CUDA_HOME=...", and a build may log compiler-version notes. None of it concerns
    a CPU kernel that builds; when the build fails, it goes into the build log.
    """

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(f"{record.levelname}: {record.getMessage()}")

    held: list[str] = []
    logger, handler = logging.getLogger("torch.utils.cpp_extension"), Hold()
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield held
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        held += [f"{w.category.__name__}: {w.message}" for w in caught]


def _first_error(text: str) -> str:
    """The line of a build's output that says what went wrong (the first compiler or linker
    error), else its first line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\berror\b|not found|No such file", line, re.IGNORECASE) and not (
            line.startswith("Error building extension")
        ):
            return line[:300]
    return lines[0][:300] if lines else "no output"


@contextlib.contextmanager
def _progress(out: TextIO | None, message: str) -> Iterator[None]:
    """`message...` on one line of `out`, then how long it took; on a terminal, seconds tick."""
    if out is None:
        yield
        return
    start, stop = time.perf_counter(), threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            out.write(f"\r{message}... {time.perf_counter() - start:.0f} s")
            out.flush()

    out.write(f"{message}...")
    out.flush()
    ticker = threading.Thread(target=tick, daemon=True) if out.isatty() else None
    if ticker:
        ticker.start()
    outcome = "failed after"
    try:
        yield
        outcome = "done in"
    finally:
        stop.set()
        if ticker:
            ticker.join()
            out.write(f"\r{message}...")
        out.write(f" {outcome} {time.perf_counter() - start:.0f} s\n")
        out.flush()


def build(*, force: bool = False, out: TextIO | None = None, on_demand: bool = False) -> Path:
    """Builds the kernel into `build_dir()` unless a build is there already (`force` rebuilds),
    and returns the library. One line on `out` says it is building and how long it took (and,
    `on_demand`, how to build ahead of time); nothing goes to stderr. Raises `BuildError` naming
    the cause when the build fails.
    """
    library = None if force else built_library()
    if library is not None:
        return library
    folder = build_dir()
    if force:
        shutil.rmtree(folder, ignore_errors=True)
    source = folder / f"{NAME}.cpp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / _BUILT).unlink(missing_ok=True)
        for stale in folder.glob(f"{NAME}*.so"):  # a damaged one: ninja, seeing it newer than
            stale.unlink()  # its objects, would not link it again
        if not source.is_file() or source.read_text() != SOURCE:
            source.write_text(SOURCE)  # rewriting the same text would make ninja recompile it
    except OSError as err:
        raise BuildError(f"cannot write the build folder {folder}: {err}", None) from err
    message = "paged_kv: building the C++ CPU decode kernel for this environment, once "
    message += "(under a minute"
    message += "; `python -m paged_kv build` does it ahead of time)" if on_demand else ")"
    with _progress(out, message), _quiet_torch_builder() as held:
        try:
            from torch.utils.cpp_extension import load

            library = load(
                name=NAME,
                sources=[str(source)],
                extra_cflags=list(CFLAGS),  # copies: they key build_dir(), and torch appends
                extra_ldflags=list(LDFLAGS),  # its libraries to the list, in place
                build_directory=str(folder),
                is_python_module=False,  # a torch operator library: no pybind11 to compile
                verbose=False,
            )
        except (ImportError, OSError, RuntimeError, subprocess.SubprocessError) as err:
            text = str(err).strip() or type(err).__name__
            log: Path | None = folder / "build.log"
            try:
                log.write_text("\n".join([text, *held]) + "\n")
            except OSError:
                log = None
            raise BuildError(_first_error(text), log) from err
    built = Path(str(library))  # not a module: its path
    size, digest = _fingerprint(built)
    (folder / _BUILT).write_text(f"{built.name} {size} {digest}\n")
    return built


def _load(library: Path):
    """Loads the library and returns the namespace of its operator, `paged_decode_f32`.

    Once per process: a second copy (another build folder) would register the operator again,
    which torch refuses while the library initialises, ending the process.
    """
    try:
        torch.ops.paged_kv_cpu.paged_decode_f32  # noqa: B018 - raises if not registered yet
    except AttributeError:
        torch.ops.load_library(str(library))
    return torch.ops.paged_kv_cpu


@functools.cache
def _kernel():
    """The kernel (`_kernel().paged_decode_f32`), loaded once per process, or None.

    It loads this environment's build (see `build_dir`); if nothing built it yet (`python -m
    paged_kv build` and the test session do), it builds it here, with a one-line notice on
    stdout. A failed build warns once, naming the cause, and leaves the torch reference in charge.
    """
    try:
        library = built_library() or build(out=sys.stdout, on_demand=True)
    except (ImportError, OSError, RuntimeError, subprocess.SubprocessError) as err:
        cause = str(err).strip() or type(err).__name__
        warnings.warn(f"the C++ CPU decode kernel did not build ({cause}); using the torch "
                      "reference.", RuntimeWarning, stacklevel=3)  # fmt: skip
        return None
    try:
        return _load(library)
    except OSError as err:
        warnings.warn(f"the C++ CPU decode kernel did not load ({err}); using the torch "
                      f"reference. `python -m paged_kv build --force` rebuilds it.",
                      RuntimeWarning, stacklevel=3)  # fmt: skip
        return None


def handles(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether `cpu_paged_decode` takes this call: fp32 CPU tensors, contiguous caches, head_dim
    a multiple of 16, no gradient wanted, and a kernel that built."""
    tensors = (q, k_cache, v_cache)
    return (
        all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
        and q.dim() == 3
        and k_cache.dim() == 4
        and k_cache.shape == v_cache.shape
        and q.shape[-1] == k_cache.shape[-1]
        and q.shape[-1] % LANES == 0
        and k_cache.is_contiguous()
        and v_cache.is_contiguous()
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
        and _kernel() is not None
    )


def cpu_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Same contract as `paged_kv.attention.paged_decode`, computed by the C++ kernel.

    Call it only where `handles(q, k_cache, v_cache)` is True.
    """
    check_decode_args(q, k_cache, v_cache, block_tables, seq_lens)
    kernel = _kernel()
    assert kernel is not None  # callers asked `handles` first, which needs the kernel
    return kernel.paged_decode_f32(
        q.contiguous(),
        k_cache,
        v_cache,
        block_tables.to(torch.int64).contiguous(),
        seq_lens.to(torch.int64).contiguous(),
        scale if scale is not None else 1 / math.sqrt(q.shape[-1]),
    )
