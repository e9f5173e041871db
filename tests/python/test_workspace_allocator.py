"""The allocator behind native kernels' workspaces, installed from Python (``_core.set_allocator``).

A test plugin (tests/abi/workspace_plugin.c) has a kernel that declares a workspace, copies x through it and fails
unless it got the size it asked for. In a child process (the plugin's ops stay registered in the process that loads
it), a counting Python allocator is installed for the CPU: the kernel's workspace must come from it, once for
repeated calls (libkabi keeps a grow-only buffer per thread), again for a larger problem (the outgrown buffer is
kept: a CUDA graph captured with it may replay it), and both go back through it once the default is restored. An
allocator that raises or answers nonsense fails the launch with its message, and the process carries on. On CUDA the
bootstrap's allocator is torch's caching allocator, which the GPU test sees in ``torch.cuda.memory_allocated``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import _cmake
from kabi import _core

_KERNEL_EXTRA_BYTES = 40  # workspace_plugin.c's EXTRA_BYTES: a kernel asks for N floats and this many bytes more

_PROBE = r"""
import json, sys
import torch
import kabi
from kabi import _core
from kabi._base.tensors import descriptor

_core.plugin_load(sys.argv[1])
report = {"allocations": [], "releases": [], "results": [], "workspace_holds_x": []}
buffers = {}


def allocate(device_type, device_index, nbytes, stream):
    report["allocations"].append([device_type, device_index, nbytes, stream])
    # torch's CPU tensors are 64-byte aligned; a workspace must be 256-byte aligned (kabi.h).
    storage = torch.empty(nbytes + 256, dtype=torch.uint8)
    address = storage.data_ptr() + (-storage.data_ptr()) % 256
    buffers[address] = (storage, nbytes)
    return address


def release(device_type, device_index, address, nbytes, stream):
    report["releases"].append([device_type, address in buffers, nbytes, stream])
    buffers.pop(address)


def copy(n):
    x = torch.randn(n)
    out = torch.full_like(x, float("nan"))
    try:
        _core.launch("abi_test_workspace_copy", "abi_test_workspace.copy", [descriptor(x)], [descriptor(out)])
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}
    storage, _ = next(reversed(buffers.values())) if buffers else (None, 0)  # the newest: the one in use
    held = False
    if storage is not None:
        start = (-storage.data_ptr()) % 256
        held = torch.equal(storage[start:start + 4 * n].view(torch.float32), x)
    report["workspace_holds_x"].append(held)
    return {"equal": torch.equal(out, 3 * x)}


_core.set_allocator([1], allocate, release)
report["results"] += [copy(37), copy(37), copy(11), copy(100)]
_core.reset_allocator()
report["results"].append(copy(100))
report["live_buffers_after_reset"] = len(buffers)


def raising(device_type, device_index, nbytes, stream):
    raise MemoryError("pool exhausted")


def not_an_address(device_type, device_index, nbytes, stream):
    return "here"


for bad in (raising, not_an_address):
    _core.set_allocator([1], bad, release)
    report["results"].append(copy(64))
_core.reset_allocator()
report["results"].append(copy(64))
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _cmake.build_workspace_test_plugin(tmp_path_factory.mktemp("workspace_plugin"))


@pytest.fixture(scope="module")
def report(plugin: str) -> dict:
    result = subprocess.run([sys.executable, "-c", _PROBE, plugin], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"the probe process failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_kernel_gets_its_workspace_from_the_python_allocator(report: dict) -> None:
    results = report["results"]
    assert results[:4] == [{"equal": True}] * 4
    # One allocation for the two calls of 37 and the smaller one of 11 (the buffer only grows), one for 100.
    assert report["allocations"] == [[1, 0, 4 * 37 + _KERNEL_EXTRA_BYTES, 0], [1, 0, 4 * 100 + _KERNEL_EXTRA_BYTES, 0]]
    # The kernel copied x into the memory the allocator handed out.
    assert report["workspace_holds_x"][:4] == [True] * 4


def test_buffers_go_back_through_the_allocator_that_gave_them(report: dict) -> None:
    # Growing kept the first buffer; after the reset, the next call released both through the Python allocator (the
    # one in use, then the outgrown one) and took its workspace from libkabi's default.
    assert report["releases"] == [[1, True, 4 * 100 + _KERNEL_EXTRA_BYTES, 0],
                                  [1, True, 4 * 37 + _KERNEL_EXTRA_BYTES, 0]]
    assert report["live_buffers_after_reset"] == 0
    assert report["results"][4] == {"equal": True}


def test_a_failing_allocator_fails_the_launch_with_its_message(report: dict) -> None:
    raised, wrong_type, recovered = report["results"][5:]
    asked = f"the installed allocator failed to allocate {4 * 64 + _KERNEL_EXTRA_BYTES} bytes on cpu:0: "
    assert raised == {"error": "InternalError",
                      "message": asked + "the Python allocator's allocate raised MemoryError: pool exhausted"}
    assert wrong_type == {"error": "InternalError", "message": asked + "the Python allocator's allocate returned "
                                                                        "str; expected the memory's address as an int"}
    assert recovered == {"equal": True}


@pytest.mark.parametrize(("device_types", "expected"), [
    ([], "device_types is empty"),
    ([0], "device_types has 0; expected DLPack device types"),
    ([64], "device_types has 64"),
])
def test_set_allocator_names_a_bad_device_type(device_types: list, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        _core.set_allocator(device_types, lambda *args: 0, lambda *args: None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_workspaces_come_from_torch_caching_allocator(plugin: str) -> None:
    probe = r"""
import json, sys
import torch
import kabi
from kabi import _core
from kabi._base.tensors import descriptor

_core.plugin_load(sys.argv[1])
x = torch.randn(1 << 20, device="cuda")
out = torch.empty_like(x)
torch.cuda.synchronize()
before = torch.cuda.memory_allocated()
_core.launch("abi_test_workspace_cuda", "abi_test_workspace.cuda", [descriptor(x)], [descriptor(out)])
after_first = torch.cuda.memory_allocated()
_core.launch("abi_test_workspace_cuda", "abi_test_workspace.cuda", [descriptor(x)], [descriptor(out)])
print(json.dumps({"first": after_first - before, "second": torch.cuda.memory_allocated() - after_first}))
"""
    result = subprocess.run([sys.executable, "-c", probe, plugin], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"the probe process failed:\n{result.stdout}\n{result.stderr}"
    grown = json.loads(result.stdout.strip().splitlines()[-1])
    workspace = 4 * (1 << 20) + _KERNEL_EXTRA_BYTES
    # torch rounds blocks up to 512 bytes; the second call reuses the thread's buffer.
    assert workspace <= grown["first"] < workspace + 512 * 1024
    assert grown["second"] == 0
