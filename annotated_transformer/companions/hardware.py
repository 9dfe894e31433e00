"""Companion of chapter 9. Where a run trains (§5.2: 8 P100 GPUs; here whatever there is): the device
(`default_device`), checked before any work (`check_device`), the settings of the whole process that
make training on it faster (`configure_process`), and a description of the machine, kept with the
run so that its timings can be read in context (`describe_hardware`, in a run directory's
hardware.json)."""

__all__ = ["check_device", "configure_process", "default_device", "describe_hardware", "use_fast_cuda_kernels"]

import os
from pathlib import Path

import torch

from annotated_transformer.helpers.torch_support import reuse_freed_memory


def default_device() -> torch.device:
    """CUDA when there is a GPU, else Apple's MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def use_fast_cuda_kernels() -> None:
    """Process-wide: float32 matrix products in TF32 on the tensor cores, and no cuDNN kernel for
    `scaled_dot_product_attention` (slow on the many shapes of batches by token count, and it gives
    a query whose keys are all masked the mean of the values; chapter 20). PyTorch then takes the
    memory-efficient kernel."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.enable_cudnn_sdp(False)


def configure_process(device: torch.device | str | None = None) -> list[str]:
    """The process-wide settings that make training on `device` (default: `default_device()`)
    faster, made once by a program that trains, never by a `Trainer`. Returns what was set."""
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda":
        use_fast_cuda_kernels()
        return ["TF32 matrix products", "no cuDNN attention kernel"]
    if device.type == "cpu" and reuse_freed_memory():
        return ["freed memory kept for reuse (mallopt)"]
    return []


def describe_hardware(device: torch.device, world_size: int = 1) -> dict:
    """The machine a run trains on, saved with the run so that its timings can be read in context."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:  # Linux names the CPU model in /proc/cpuinfo
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "device": device.type,
        "cpu": cpu,
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_kernels": torch.backends.cpu.get_cpu_capability(),  # the float32 kernel family (chapter 8)
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "processes": world_size,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def check_device(device: torch.device | str | None, option: str | None = None) -> torch.device:
    """The device to work on, `device` or else `default_device()`, checked before any work: a GPU
    this machine lacks is refused at once, not after the data and the vocabulary are ready.
    `option` is the command-line option that chose it, for the message (chapter 16)."""
    if device is None:
        return default_device()
    device = torch.device(device)
    problem = _device_problem(device)
    if problem is not None:
        given, cpu = (f"{option} {device}", f"{option} cpu") if option else (f"device={str(device)!r}",
                                                                             "device='cpu'")
        raise ValueError(f"{given}: {problem}; use {cpu}, or no device at all for the best one there is")
    return device


def _device_problem(device: torch.device) -> str | None:
    """Why this machine cannot use `device`, or None."""
    if device.type == "cuda":
        if torch.version.cuda is None and torch.version.hip is None:
            return f"this PyTorch ({torch.__version__}) was built without CUDA"
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return "PyTorch finds no CUDA GPU on this machine (a driver, or CUDA_VISIBLE_DEVICES?)"
        if device.index is not None and device.index >= count:
            return f"this machine has {count} CUDA GPU(s), numbered from 0"
    elif device.type == "mps" and not torch.backends.mps.is_available():
        return "PyTorch finds no Apple GPU (MPS) on this machine"
    elif device.type not in ("cpu", "cuda", "mps"):
        return f"this package trains and translates on cpu, cuda or mps, not {device.type}"
    return None
