"""The persistent tuning cache across processes: concurrent writers lose nothing; torn and corrupt records are skipped,
reported once, and the file is rebuilt.

Every libkabi call runs in a child process (``python -c`` with ctypes over the C ABI), so each one is a real, separate
process with its own cache state. libkabi is found through KABI_LIBRARY_PATH, else next to the installed ``kabi._core``
(``kabi/lib/libkabi.so``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

# A child process: register an external CPU matmul kernel through the C ABI, then store one measured record per
# problem with kabi_tuning_store (the tuner's own path), or report the cache's statistics.
CHILD = r"""
import ctypes, json, os, sys, time
from ctypes import POINTER, Structure, byref, c_char_p, c_double, c_int32, c_int64, c_size_t, c_uint8, c_uint16
from ctypes import c_uint32, c_uint64, c_void_p, sizeof

lib = ctypes.CDLL(sys.argv[1])
lib.kabi_last_error.restype = c_char_p
command = sys.argv[2]

def check(status, what):
    if status != 0:
        raise SystemExit(f"{what} failed with status {status}: {lib.kabi_last_error().decode()}")

class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]

class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]

class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]

class Args(Structure):
    _fields_ = [("struct_size", c_size_t), ("extensions", c_void_p), ("inputs", POINTER(DLTensor)),
                ("num_inputs", c_int32), ("num_outputs", c_int32), ("outputs", POINTER(DLTensor)),
                ("attributes", c_void_p), ("num_attributes", c_int32), ("stream", c_void_p), ("workspace", c_void_p),
                ("workspace_size", c_size_t)]

class KernelDesc(Structure):
    _fields_ = [("struct_size", c_size_t), ("extensions", c_void_p), ("op", c_char_p), ("name", c_char_p),
                ("backend", c_char_p), ("device_type", c_int32), ("arch_min", c_int32), ("arch_max", c_int32),
                ("archs", POINTER(c_int32)), ("num_archs", c_int32), ("priority", c_int32),
                ("required_features", c_uint64), ("dtypes", c_uint32), ("type_constraints", c_char_p),
                ("layouts", c_uint32), ("alignment", c_uint32), ("batch_mode", c_int32), ("kind", c_int32),
                ("function", c_void_p), ("binary", c_void_p), ("supports", c_void_p), ("workspace", c_void_p),
                ("user_data", c_void_p), ("user_data_free", c_void_p), ("fingerprint", c_char_p)]

class TuningRecord(Structure):
    _fields_ = [("struct_size", c_size_t), ("kernel", c_void_p), ("time_us", c_double), ("note", c_char_p)]

if command == "store":
    worker, count, go_file = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    op = c_void_p()
    check(lib.kabi_op_find(b"matmul", byref(op)), "kabi_op_find")
    name = f"test.cache.worker{worker}".encode()
    desc = KernelDesc(struct_size=sizeof(KernelDesc), op=b"matmul", name=name, backend=b"test", device_type=1,
                      dtypes=1 << 2, layouts=0xF, kind=3, fingerprint=b"fp-" + name)
    kernel = c_void_p()
    check(lib.kabi_kernel_register(byref(desc), byref(kernel)), "kabi_kernel_register")
    while not os.path.exists(go_file):
        time.sleep(0.001)
    for index in range(count):
        m, k, n = 64, 1 + index, 1 + worker
        shapes = [(c_int64 * 2)(m, k), (c_int64 * 2)(k, n)]
        tensors = (DLTensor * 2)(*[DLTensor(None, DLDevice(1, 0), 2, DLDataType(2, 32, 1), shape, None, 0)
                                   for shape in shapes])
        args = Args(struct_size=sizeof(Args), inputs=tensors, num_inputs=2)
        record = TuningRecord(sizeof(TuningRecord), kernel, 10.0 + index, b"")
        check(lib.kabi_tuning_store(op, byref(args), byref(record), 1), "kabi_tuning_store")
elif command == "stats":
    records, corrupt = c_int64(), c_int64()
    check(lib.kabi_cache_stats(byref(records), byref(corrupt)), "kabi_cache_stats")
    print(json.dumps({"records": records.value, "corrupt": corrupt.value}))
"""


def _libkabi() -> Path:
    configured = os.environ.get("KABI_LIBRARY_PATH")
    if configured:
        return Path(configured)
    spec = importlib.util.find_spec("kabi._core")
    if spec is None or spec.origin is None:
        pytest.fail("libkabi not found: install kabi, or set KABI_LIBRARY_PATH to a built libkabi.so")
    return Path(spec.origin).parent / "lib" / "libkabi.so"


def _child(cache_dir: Path, *arguments: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "KABI_CACHE_DIR": str(cache_dir)}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(_libkabi()), *arguments], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str]) -> tuple[str, str]:
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{stdout}\n{stderr}"
    return stdout, stderr


def _store(cache_dir: Path, worker: int, count: int, go_file: Path) -> subprocess.Popen[str]:
    return _child(cache_dir, "store", str(worker), str(count), str(go_file))


def _stats(cache_dir: Path) -> tuple[dict[str, int], str]:
    stdout, stderr = _finish(_child(cache_dir, "stats"))
    return json.loads(stdout), stderr


def _valid_lines(log: Path) -> list[str]:
    """Lines of the cache file whose CRC-32 checks out (the file's own validity rule, computed independently)."""
    valid = []
    for line in log.read_bytes().split(b"\n")[:-1]:
        body, _, checksum = line.rpartition(b"\t")
        if body.startswith(b"v4\t") and checksum == b"%08x" % zlib.crc32(body):
            valid.append(line.decode())
    return valid


def test_eight_processes_writing_at_once_lose_no_record(tmp_path: Path) -> None:
    workers, per_worker = 8, 40
    go_file = tmp_path / "go"
    children = [_store(tmp_path / "cache", worker, per_worker, go_file) for worker in range(workers)]
    go_file.touch()  # every child has registered its kernel and now stores at once
    for child in children:
        _finish(child)

    stats, stderr = _stats(tmp_path / "cache")
    assert stats == {"records": workers * per_worker, "corrupt": 0}
    assert "corrupt" not in stderr
    lines = _valid_lines(tmp_path / "cache" / "tuning-v4.log")
    assert len(lines) == workers * per_worker
    kernels = {line.split("\t")[4] for line in lines}
    assert kernels == {f"test.cache.worker{worker}" for worker in range(workers)}


def test_torn_and_garbage_records_are_skipped_reported_once_and_rebuilt(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    go_file = tmp_path / "go"
    go_file.touch()
    _finish(_store(cache, 0, 5, go_file))
    log = cache / "tuning-v4.log"
    first_line = log.read_text().splitlines()[0]
    with log.open("a") as stream:
        stream.write("this is not a record\n")
        stream.write(first_line[: len(first_line) // 2])  # a writer killed mid-line: no newline

    stats, stderr = _stats(cache)
    assert stats == {"records": 5, "corrupt": 2}
    assert stderr.count(f"kabi: skipped 2 corrupt records in {log}") == 1

    text = log.read_text()
    assert text.endswith("\n") and "not a record" not in text
    assert len(_valid_lines(log)) == len(text.splitlines()) == 5
    stats, stderr = _stats(cache)
    assert stats == {"records": 5, "corrupt": 0}
    assert "skipped" not in stderr


def test_writer_killed_mid_stream_leaves_a_readable_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    go_file = tmp_path / "go"
    go_file.touch()
    writer = _store(cache, 3, 1_000_000, go_file)
    log = cache / "tuning-v4.log"
    deadline = time.monotonic() + 60
    while (not log.exists() or log.stat().st_size < 4096) and time.monotonic() < deadline:
        time.sleep(0.01)
    writer.send_signal(signal.SIGKILL)
    writer.communicate(timeout=60)
    assert writer.returncode == -signal.SIGKILL

    stats, _ = _stats(cache)
    valid = _valid_lines(log)
    assert stats["records"] == len(valid) > 0
    assert stats["corrupt"] <= 1  # at most the one record being written when the writer died
    assert log.read_bytes().endswith(b"\n")
    assert _stats(cache)[0] == {"records": len(valid), "corrupt": 0}
