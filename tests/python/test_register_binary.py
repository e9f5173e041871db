"""register_binary (kabi_binary_load): one manifest registered as a native kernel with a Python supports predicate, on
the CPU machine (the image is never loaded into a driver). Registering reads the manifest only; the image is read and
checked against the manifest's hash at the kernel's first launch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kabi
from _made_up_launch import launch_matmul_at_made_up_addresses
from kabi.backends.triton import Manifest, ManifestParam
from kabi.backends.triton._manifest import fnv1a64, write_binary
from kabi.ops._kernel_registration import register_binary

NAME = "test.register_binary.tiled"


@pytest.fixture
def manifest(tmp_path: Path):
    image = b"\x7fELF" + bytes(range(60))
    path = write_binary(Manifest(
        op="matmul", name=NAME, backend="test", device="cuda", priority=0, dtypes=("float16",),
        layouts=("contiguous",), alignment=16, batch_mode="none", image=f"{NAME}.cubin", image_format="cubin",
        image_fnv1a64=fnv1a64(image), arch=90, archs=(90,), entry="kernel", grid=("cdiv(M, 64)", "1", "1"),
        block=(128, 1, 1), shared_memory_bytes=0, cluster_size=1,
        params=(ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2))), image, tmp_path)
    yield path
    if any(kernel.name == NAME for kernel in kabi.kernels("matmul")):
        kabi.unregister_kernel("matmul", NAME)


def test_a_manifest_registers_with_its_predicate_once(manifest: Path) -> None:
    assert register_binary(manifest, "matmul", lambda problem: True) == NAME
    info = kabi.kernel_info("matmul", NAME)
    assert (info.kind, info.backend, info.archs, info.dtypes) == ("device_binary", "test", (90,), ("float16",))
    # The same kernel again is kept, with or without a predicate.
    assert register_binary(manifest, "matmul") == NAME
    assert sum(kernel.name == NAME for kernel in kabi.kernels("matmul")) == 1


def test_a_manifest_of_another_op_is_refused_and_left_out(manifest: Path) -> None:
    with pytest.raises(kabi.InvalidArgumentError, match="declares op matmul, not linear"):
        register_binary(manifest, "linear", lambda problem: True)
    assert not any(kernel.name == NAME for kernel in kabi.kernels("matmul"))


def test_bad_arguments_are_named(manifest: Path, tmp_path: Path) -> None:
    with pytest.raises(kabi.ArgumentTypeError, match="supports must be callable"):
        register_binary(manifest, "matmul", "always")
    with pytest.raises(kabi.KabiIOError, match="is not a file"):
        register_binary(tmp_path / "absent.kabi-manifest", "matmul")



def test_the_image_is_read_and_checked_at_the_first_launch_only(manifest: Path) -> None:
    image = manifest.with_suffix(".cubin")
    image.write_bytes(b"\x7fELF tampered")
    assert register_binary(manifest, "matmul", lambda problem: True) == NAME
    for _ in range(2):  # refused at every launch, naming the manifest's line and the image
        with pytest.raises(kabi.InvalidArgumentError, match=rf"{manifest}:\d+: image_fnv1a64: image {image.name} "
                                                             r"hashes to [0-9a-f]{16}, not [0-9a-f]{16}"):
            launch_matmul_at_made_up_addresses(NAME, torch.float16)
    image.unlink()
    with pytest.raises(kabi.KabiIOError, match=rf"{manifest}:\d+: image: image file {image} is missing"):
        launch_matmul_at_made_up_addresses(NAME, torch.float16)


def test_an_intact_image_goes_on_to_the_driver(manifest: Path) -> None:
    register_binary(manifest, "matmul")
    with pytest.raises(kabi.KabiError) as refused:
        launch_matmul_at_made_up_addresses(NAME, torch.float16)
    assert str(manifest) not in str(refused.value)
