"""register_binary and register_binaries (kabi_binary_load_many): manifests registered as a native kernel with a Python supports predicate, on
the CPU machine (the image is never loaded into a driver). Registering reads the manifest only; the image is read and
checked against the manifest's hash at the kernel's first launch."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch

import kabi
from _made_up_launch import launch_matmul_at_made_up_addresses
from kabi.backends.triton import Manifest, ManifestParam
from kabi.backends.triton._manifest import fnv1a64, write_binary
from kabi.ops._kernel_registration import register_binaries, register_binary

NAME = "test.register_binary.tiled"


def _write_manifest(directory: Path, name: str, image: bytes = b"\x7fELF" + bytes(range(60))) -> Path:
    return write_binary(Manifest(
        op="matmul", name=name, backend="test", device="cuda", priority=0, dtypes=("float16",),
        layouts=("contiguous",), alignment=16, batch_mode="none", image=f"{name}.cubin", image_format="cubin",
        image_fnv1a64=fnv1a64(image), arch=90, archs=(90,), entry="kernel", grid=("cdiv(M, 64)", "1", "1"),
        block=(128, 1, 1), shared_memory_bytes=0, cluster_size=1,
        params=(ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2))), image, directory)


def _unregister_test_kernels() -> None:
    for kernel in kabi.kernels("matmul"):
        if kernel.name.startswith(NAME):
            kabi.unregister_kernel("matmul", kernel.name)


@pytest.fixture
def manifest(tmp_path: Path):
    yield _write_manifest(tmp_path, NAME)
    _unregister_test_kernels()


@pytest.fixture
def many_manifests(tmp_path: Path):
    # Enough that the core reads them on several threads.
    yield [_write_manifest(tmp_path, f"{NAME}.{index:03d}") for index in range(150)]
    _unregister_test_kernels()


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


def _registered_test_kernels() -> list[str]:
    return sorted(kernel.name for kernel in kabi.kernels("matmul") if kernel.name.startswith(NAME))


def test_many_manifests_register_in_order_with_their_predicates(many_manifests: list[Path]) -> None:
    asked = []

    def predicate_of(index: int):
        return lambda problem: asked.append(index) or True

    names = register_binaries([(path, "matmul", predicate_of(index)) for index, path in enumerate(many_manifests)])
    assert names == [f"{NAME}.{index:03d}" for index in range(len(many_manifests))]
    assert _registered_test_kernels() == names
    # Again, plus one repeated within the list: every kernel is kept, and each name comes back where it was asked.
    again = register_binaries([(path, "matmul", None) for path in many_manifests[:3] + many_manifests[:1]])
    assert again == names[:3] + names[:1]
    assert _registered_test_kernels() == names


def test_one_bad_manifest_registers_none_and_frees_every_predicate(many_manifests: list[Path],
                                                                   tmp_path: Path) -> None:
    class Predicate:
        def __call__(self, problem) -> bool:
            return True

    predicates = [Predicate() for _ in many_manifests]
    alive = [weakref.ref(predicate) for predicate in predicates]
    broken = many_manifests[97]
    broken.write_text(broken.read_text().replace("entry = kernel", "entry ="))
    with pytest.raises(kabi.KabiError, match=rf"{broken}: kernel matmul/{NAME}.097: entry is empty"):
        register_binaries(list(zip(many_manifests, ["matmul"] * len(many_manifests), predicates)))
    assert _registered_test_kernels() == []
    del predicates
    gc.collect()
    assert all(reference() is None for reference in alive)


def test_the_first_failure_in_order_is_the_one_named(many_manifests: list[Path]) -> None:
    for index in (40, 120):
        text = many_manifests[index].read_text()
        many_manifests[index].write_text(text.replace("entry = kernel", "entry ="))
    with pytest.raises(kabi.KabiError) as refused:
        register_binaries([(path, "matmul", None) for path in many_manifests])
    assert str(many_manifests[40]) in str(refused.value) and str(many_manifests[120]) not in str(refused.value)


def test_a_list_with_two_fingerprints_for_one_kernel_is_refused(tmp_path: Path) -> None:
    first = _write_manifest(tmp_path / "first", NAME)
    second = _write_manifest(tmp_path / "second", NAME, image=b"\x7fELF another image")
    try:
        with pytest.raises(kabi.AlreadyExistsError, match=rf"{second}: kernel matmul/{NAME} is also declared by {first}"):
            register_binaries([(first, "matmul", None), (second, "matmul", None)])
        assert _registered_test_kernels() == []
    finally:
        _unregister_test_kernels()


def test_an_empty_list_registers_nothing() -> None:
    assert register_binaries([]) == []

