"""The machine and software a run is recorded on (config.json's `versions`, `git_commit`, `platform`),
and whether this CPU multiplies bfloat16 natively. Reading them imports no torch."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


def git_commit(cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd or Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        commit = out.stdout.strip()
        if out.returncode != 0 or not commit:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd or Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    """The versions of Python and of the packages that decide a run's arithmetic, as installed (their
    metadata: reading it imports none of them, so the judging half can ask without importing torch)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "unknown"

    return {
        "python": sys.version.split()[0],
        **{name: installed(name) for name in ("torch", "numpy", "gymnasium", "sacbench")},
    }


# The CPU flags under which oneDNN multiplies bfloat16 natively. Without either, torch still runs
# bfloat16 products, but emulated, many times slower than float32 (docs/measurements.md, machine.py).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_info() -> tuple[str, frozenset[str]]:
    """The CPU's model name and flags as Linux's /proc/cpuinfo gives them (first processor);
    ("unknown", empty) where it cannot be read."""
    model, flags = "unknown", frozenset()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return model, flags
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = frozenset(value.split())
    return model, flags


def _has_native_bf16(flags: frozenset[str]) -> bool | None:
    return bool(flags & set(NATIVE_BF16_FLAGS)) if flags else None


def native_bf16() -> bool | None:
    """Whether this CPU multiplies bfloat16 natively (`NATIVE_BF16_FLAGS`); None when unknown."""
    return _has_native_bf16(cpu_info()[1])


def platform_info() -> dict[str, str]:
    """The machine a run was recorded on (config.json's `platform`)."""
    model, flags = cpu_info()
    bf16 = _has_native_bf16(flags)
    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
        "cpu_count": str(os.cpu_count()),
        "cpu": model,
        "native_bf16": "unknown" if bf16 is None else str(bf16).lower(),
    }
