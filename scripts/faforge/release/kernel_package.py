"""The kernel package a split flash-attn pins, for `faforge verify`: among the packages of the call,
beside the flash-attn package by its exact file name, or downloaded from the channel an earlier run
published it to (checked against that channel's sha256)."""

from __future__ import annotations

from pathlib import Path

from faforge import config
from faforge.channel.repodata import query
from faforge.errors import EXIT_BAD_INPUT, EXIT_REMOTE, FaforgeError, RemoteError
from faforge.matrix.kernels import KERNEL_PACKAGE, KernelPin
from faforge.packagefile import sha256_of
from faforge.release.package import PackageFacts, read_package
from faforge.wheelfetch import download_checked


def pins_kernel(flash_attn: PackageFacts, kernel: PackageFacts) -> bool:
    """Whether `flash_attn` requires exactly this kernel build (name, version, build, platform)."""
    pin = flash_attn.kernel_pin
    return (
        pin is not None
        and kernel.is_kernel_package
        and flash_attn.subdir == kernel.subdir
        and (kernel.version, kernel.build) == (pin.version, pin.build)
    )


def find_kernel_package(
    package: PackageFacts, given: list[PackageFacts], channel: str | None = None
) -> PackageFacts | None:
    """The kernel package a split flash-attn pins: among `given` (this call's packages), else beside it
    by its exact file name, else fetched from `channel` (one published before). None when it pins none;
    FaforgeError (exit 2) when it is nowhere."""
    pin = package.kernel_pin
    if pin is None:
        return None
    for other in given:
        if pins_kernel(package, other):
            return other
    beside = package.path.parent / pin.filename()
    where = beside if beside.is_file() else (fetch_kernel_package(pin, package.subdir, channel) if channel else None)
    if where is not None:
        found = read_package(where)
        if pins_kernel(package, found):
            return found
        raise FaforgeError(
            f"{package.filename}: {where} is named as its kernel package {pin}, but its metadata says "
            f"{found.name} {found.version} {found.build} ({found.subdir})",
            hint="rebuild or re-download the kernel package",
        )
    raise FaforgeError(
        f"{package.filename}: needs its kernel package {pin}, but {pin.filename()} is neither among the "
        f"packages given nor beside it in {package.path.parent}",
        hint=f"pass it too: faforge verify {package.path} path/to/{pin.filename()} (its kernel job's package), "
        "or --kernel-channel URL where it was published",
    )


def fetch_kernel_package(pin: KernelPin, subdir: str, channel: str) -> Path:
    """The pinned kernel package from `channel`'s repodata record, downloaded into faforge's cache (kept
    while its sha256 matches the record's): a cell's job whose kernel package an earlier run published."""
    record = next(
        (
            r
            for r in query(channel, [KERNEL_PACKAGE], [subdir])
            if (str(r.version), str(r.build), str(r.subdir)) == (pin.version, pin.build, subdir)
        ),
        None,
    )
    if record is None:
        raise FaforgeError(
            f"--kernel-channel {channel}: holds no {pin} for {subdir}",
            hint="name the channel its kernel job published to, or pass the kernel package itself",
        )
    if record.sha256 is None:
        remote = str(channel).startswith(
            ("http://", "https://")
        )  # a local channel's index is bad input, as for any local file
        raise FaforgeError(
            f"--kernel-channel {channel}: its record of {record.file_name} "
            "has no sha256, so a download cannot be checked",
            input=channel,
            hint="re-index the channel (`faforge index`), or pass the kernel package itself",
            exit_code=EXIT_REMOTE if remote else EXIT_BAD_INPUT,
        )
    sha256 = record.sha256.hex()
    target = config.cache_dir() / "kernel-packages" / subdir / pin.filename()
    if target.is_file() and sha256_of(target) == sha256:
        return target
    return download_checked(
        str(record.url),
        sha256,
        target,
        lambda got: RemoteError(
            f"--kernel-channel {channel}: {record.url} does not have the sha256 its repodata says ({sha256[:12]}…)",
            hint="the channel changed during the download, or its index is stale: re-index it, then retry",
        ),
    )
