"""What this machine, this Python and this C library can do for training (chapter 9's speed section).

- `check_precision_support(device, precision)`: refuses, with a message that says what the device
  can run instead, a precision it cannot (bf16 on a GPU without it, fp16 off CUDA).
- `check_compile_support(device)`: whether `torch.compile` can work here, with a message that says
  what is missing where it cannot (a C++ compiler for the CPU, `triton` for a CUDA GPU).
- `reuse_freed_memory()`: ask glibc's allocator (`mallopt`) to keep large freed blocks for reuse
  rather than return them to the operating system, which would hand them back as fresh pages, zeroed
  on first touch, at the next step. It changes no result, only where the memory comes from, and it
  affects the whole process: chapter 9's `configure_process` calls it for a run on a CPU.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import sys

import torch

__all__ = ["check_compile_support", "check_precision_support", "reuse_freed_memory"]


def check_compile_support(device: torch.device) -> None:
    """Raise a clear error where `torch.compile` cannot work: its inductor backend writes C++ for
    the CPU (it needs a C++ compiler) and Triton kernels for a CUDA GPU (it needs `triton`)."""
    if not torch._dynamo.is_dynamo_supported():
        raise RuntimeError(
            f"torch.compile is not supported by this Python ({sys.version.split()[0]}) and torch "
            f"({torch.__version__}); train without compile"
        )
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        raise RuntimeError("torch.compile on a CUDA GPU needs the triton package: pip install triton, "
                           "or train without compile")
    if device.type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        raise RuntimeError("torch.compile on the CPU needs a C++ compiler (g++ or clang++) on the PATH: "
                           "install one, or train without compile")


def reuse_freed_memory() -> bool:
    """Ask glibc's allocator to keep large freed blocks for reuse rather than return them to the
    operating system. Affects the whole process; True when applied (Linux with glibc), False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # another C library (musl): nothing to tune
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # mallopt's parameters (malloc.h)
    return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def check_precision_support(device: torch.device, precision: str) -> None:
    """Refuse an explicit precision `device` cannot run: bf16 on a GPU without bfloat16 support, and
    fp16 anywhere but on a CUDA GPU (its gradient scaler is CUDA's)."""
    cuda = device.type == "cuda"
    if precision == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"precision 'bf16': this GPU ({torch.cuda.get_device_name(device)}) has no bfloat16 support; "
            f"use 'fp16' (float16 with a gradient scaler) or 'auto'"
        )
    if precision == "fp16" and not cuda:
        raise ValueError(
            "precision 'fp16' needs a CUDA GPU (it relies on a gradient scaler); use 'bf16' or 'fp32' "
            "on the CPU"
        )
