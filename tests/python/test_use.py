"""kabi.use scopes (nesting, threads, asyncio) and the KABI_FORCE environment twin."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest
import torch

import kabi

pytestmark = pytest.mark.usefixtures("untuned")


def pick(a=None, b=None):
    a = torch.randn(6, 6) if a is None else a
    b = torch.randn(6, 6) if b is None else b
    return kabi.explain(kabi.ops.matmul, a, b).pick


def test_backend_and_kernel_names_and_nesting():
    assert pick() == "cpu.openblas.gemm"
    with kabi.use(matmul="torch"):
        assert pick() == "torch.matmul.cpu"
        with kabi.use(matmul="cpu.openblas.gemm"):
            assert pick() == "cpu.openblas.gemm"
        assert pick() == "torch.matmul.cpu"
        with kabi.use(matmul=None):
            assert pick() == "cpu.openblas.gemm"
    assert pick() == "cpu.openblas.gemm"


def test_forcing_changes_which_implementation_runs():
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    from kabi.ops._front import front_of

    table = front_of(kabi.ops.matmul).cache
    with kabi.use(matmul="torch"):
        kabi.ops.matmul(a, b)
        from kabi.ops._scopes import active_scope

        assert table.find((a, b), (), active_scope())[0] is torch.matmul
    kabi.ops.matmul(a, b)
    assert table.find((a, b), (), None)[0] is not torch.matmul


def test_forcing_something_with_no_eligible_kernel_names_it_and_the_rejections():
    with kabi.use(matmul="cpu"):
        with pytest.raises(kabi.NoEligibleKernelError) as error:
            kabi.ops.matmul(torch.randn(2, 2, dtype=torch.float16), torch.randn(2, 2, dtype=torch.float16))
    message = str(error.value)
    assert '"cpu"' in message and "cpu.openblas.gemm" in message and "float16" in message


def test_forcing_an_unknown_name():
    with kabi.use(matmul="no.such.kernel"):
        with pytest.raises(kabi.NoEligibleKernelError, match="no.such.kernel"):
            kabi.ops.matmul(torch.randn(2, 2), torch.randn(2, 2))


def test_use_rejects_unknown_ops_and_bad_values():
    with pytest.raises(ValueError, match="unknown op 'conv'"):
        with kabi.use(conv="torch"):
            pass
    with pytest.raises(TypeError, match="backend or kernel name"):
        with kabi.use(matmul=3):
            pass


def test_scopes_are_per_thread():
    barrier = threading.Barrier(2)
    picks = {}

    def forced():
        with kabi.use(matmul="torch"):
            barrier.wait()
            picks["forced"] = pick()
            barrier.wait()

    def free():
        barrier.wait()
        picks["free"] = pick()
        barrier.wait()

    threads = [threading.Thread(target=forced), threading.Thread(target=free)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert picks == {"forced": "torch.matmul.cpu", "free": "cpu.openblas.gemm"}


def test_scopes_are_per_asyncio_task():
    async def in_scope(event: asyncio.Event, other: asyncio.Event):
        with kabi.use(matmul="torch"):
            event.set()
            await other.wait()
            return pick()

    async def outside(event: asyncio.Event, other: asyncio.Event):
        await event.wait()
        result = pick()
        other.set()
        return result

    async def main():
        event, other = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(in_scope(event, other), outside(event, other))

    assert asyncio.run(main()) == ["torch.matmul.cpu", "cpu.openblas.gemm"]


def run_python(code: str, tmp_path, **environment: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KABI_CACHE_DIR": str(tmp_path), "KABI_TUNE": "off", **environment}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_kabi_force_environment_variable(tmp_path):
    code = (
        "import torch, kabi\n"
        "a, b = torch.randn(4, 4), torch.randn(4, 4)\n"
        "e = kabi.explain(kabi.ops.matmul, a, b)\n"
        "print(e.pick, e.forced)\n"
        "torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)\n"
        "with kabi.use(matmul='cpu'):\n"
        "    print(kabi.explain(kabi.ops.matmul, a, b).pick)\n"
    )
    result = run_python(code, tmp_path, KABI_FORCE="matmul=torch")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["torch.matmul.cpu", "torch", "cpu.openblas.gemm"]


def test_kabi_force_with_no_eligible_kernel_fails_clearly(tmp_path):
    code = "import torch, kabi\nkabi.ops.matmul(torch.randn(2, 2).half(), torch.randn(2, 2).half())\n"
    result = run_python(code, tmp_path, KABI_FORCE="matmul=cpu.openblas.gemm")
    assert result.returncode != 0
    assert "NoEligibleKernelError" in result.stderr and "cpu.openblas.gemm" in result.stderr


def test_kabi_force_is_parsed_by_the_core(monkeypatch):
    from kabi.ops import _scopes

    monkeypatch.setenv("KABI_FORCE", " other = cpu , matmul = torch ")
    assert _scopes.environment_choice("matmul") == "torch"
    a, b = torch.randn(3, 5), torch.randn(5, 7)
    explanation = kabi.explain(kabi.ops.matmul, a, b)
    assert (explanation.forced, explanation.pick) == ("torch", "torch.matmul.cpu")
    monkeypatch.setenv("KABI_FORCE", "other=cpu")
    assert _scopes.environment_choice("matmul") is None


@pytest.mark.parametrize(
    "value, message",
    [
        ("matmul=torch,matmul=cpu", "KABI_FORCE names op matmul twice"),
        ("matmul=torch,other=cpu, other = torch", "KABI_FORCE names op other twice"),
        ("matmul", 'KABI_FORCE entry "matmul" is not op=backend-or-kernel'),
        ("matmul=", 'KABI_FORCE entry "matmul=" is not op=backend-or-kernel'),
    ],
)
def test_kabi_force_that_says_two_things_is_refused_everywhere(monkeypatch, value, message):
    from kabi.ops import _scopes

    monkeypatch.setenv("KABI_FORCE", value)
    quoted = f'KABI_FORCE="{value}"'
    with pytest.raises(kabi.InvalidArgumentError, match=message) as raised:
        _scopes.environment_choice("matmul")
    assert quoted in str(raised.value)
    # The call and explain read the same parse: neither picks one of the two choices.
    a, b = torch.randn(3, 9), torch.randn(9, 2)
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        kabi.explain(kabi.ops.matmul, a, b)
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        kabi.ops.matmul(a, b)
    # kabi.use overrides the environment without reading it.
    with kabi.use(matmul="torch"):
        assert pick(a, b) == "torch.matmul.cpu"
