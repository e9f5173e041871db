"""torch.ops.kabi.<op>: the custom op's schema, its fake implementation against the real one, and torch.compile of
code calling kabi.ops.matmul — no graph break, results equal to eager, kabi's pick run at run time."""

import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import kabi
from kabi._base.declarations import op_specs
from kabi.ops._torch_ops import torch_op

BROADCAST_SHAPES = [
    ((4, 3), (3, 5)),
    ((2, 4, 3), (2, 3, 5)),
    ((2, 1, 4, 3), (6, 3, 5)),
    ((4, 3), (2, 3, 5)),
    ((2, 4, 3), (3, 5)),
    ((0, 3), (3, 5)),
]

# torch.matmul's vectors: vector @ vector (0-d), matrix @ vector, vector @ matrix, batched both ways.
VECTOR_SHAPES = [((3,), (3,)), ((4, 3), (3,)), ((3,), (3, 5)), ((2, 4, 3), (3,)), ((3,), (2, 3, 5))]


def mlp_block(x, w1, w2):
    return kabi.ops.matmul(torch.relu(kabi.ops.matmul(x, w1)) + 1.0, w2).sum(dim=-1)


class GraphCounter:
    """A torch.compile backend that records each graph and runs it as it is."""

    def __init__(self):
        self.graphs = []

    def __call__(self, graph_module, example_inputs):
        self.graphs.append(graph_module)
        return graph_module.forward

    def kabi_calls(self):
        return sum(node.target is torch.ops.kabi.matmul.default for graph in self.graphs for node in graph.graph.nodes)


def test_every_registry_op_is_a_custom_op_with_its_schema():
    # registry/ops only: ops other tests register with kabi.register_op live on in this process.
    for name in op_specs():
        overload = torch_op(name)
        assert overload is getattr(torch.ops.kabi, name).default
        assert torch.Tag.pt2_compliant_tag in overload.tags
    assert str(torch_op("matmul")._schema) == "kabi::matmul(Tensor a, Tensor b) -> Tensor"


def test_unknown_op_is_reported_with_the_defined_ones():
    with pytest.raises(kabi.NotFoundError, match="matmul"):
        torch_op("conv")


@pytest.mark.parametrize(("a_shape", "b_shape"), BROADCAST_SHAPES)
def test_custom_op_runs_kabi_and_its_fake_matches_the_real_result(a_shape, b_shape, spy):
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    real = torch.ops.kabi.matmul(a, b)
    torch.testing.assert_close(real, torch.matmul(a, b))
    assert spy.calls == [(a_shape, b_shape)]
    with FakeTensorMode() as mode:
        fake = torch.ops.kabi.matmul(mode.from_tensor(a), mode.from_tensor(b))
    assert (fake.shape, fake.dtype, fake.device, fake.stride()) == (real.shape, real.dtype, real.device, real.stride())
    assert len(spy.calls) == 1


@pytest.mark.parametrize(("a_shape", "b_shape"), VECTOR_SHAPES)
def test_fake_matches_the_real_result_for_vectors(a_shape, b_shape, untuned):
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    real = torch.ops.kabi.matmul(a, b)
    torch.testing.assert_close(real, torch.matmul(a, b))
    with FakeTensorMode() as mode:
        fake = torch.ops.kabi.matmul(mode.from_tensor(a), mode.from_tensor(b))
    assert (fake.shape, fake.dtype, fake.stride()) == (real.shape, real.dtype, real.stride())


@pytest.mark.parametrize(("a_shape", "b_shape"), VECTOR_SHAPES)
def test_fullgraph_compile_of_vectors_matches_eager_with_gradients(a_shape, b_shape, untuned):
    def product(a, b):
        return kabi.ops.matmul(a, b) * 2.0

    a = torch.randn(a_shape, dtype=torch.float64, requires_grad=True)
    b = torch.randn(b_shape, dtype=torch.float64, requires_grad=True)
    counter = GraphCounter()
    torch._dynamo.reset()
    result = torch.compile(product, backend=counter, fullgraph=True)(a, b)
    expected = torch.matmul(a, b) * 2.0
    assert result.shape == expected.shape and counter.kabi_calls() == 1
    torch.testing.assert_close(result, expected)
    grads = torch.autograd.grad(result.sum(), (a, b))
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), (a, b)))


@pytest.mark.parametrize(
    ("a", "b", "error", "message"),
    [
        ((4, 3), (5, 2), kabi.InvalidArgumentError, r"b's dimension K \(-2\) must be 3"),
        ((), (3, 2), kabi.InvalidArgumentError, r"a has shape \[\] \(rank 0\); expected \[\.\.\., M, K\] or a vector"),
        ((2, 4, 3), (3, 3, 2), kabi.InvalidArgumentError, "do not broadcast: batch dimension -1 is 2 in a and 3 in b"),
    ],
)
def test_fake_implementation_rejects_bad_shapes_like_the_core(a, b, error, message):
    with pytest.raises(error, match=message):
        kabi.ops.matmul(torch.randn(a), torch.randn(b))
    with FakeTensorMode(), pytest.raises(error, match=message):
        torch.ops.kabi.matmul(torch.empty(a), torch.empty(b))


def test_fake_implementation_rejects_mixed_and_unsupported_dtypes():
    with FakeTensorMode():
        with pytest.raises(kabi.UnsupportedDtypeError, match="a has dtype float32 but b has float64"):
            torch.ops.kabi.matmul(torch.empty(4, 3), torch.empty(3, 2, dtype=torch.float64))
        with pytest.raises(kabi.UnsupportedDtypeError, match="dtype bool is not one of"):
            torch.ops.kabi.matmul(torch.empty(4, 3, dtype=torch.bool), torch.empty(3, 2, dtype=torch.bool))


def test_opcheck_passes():
    a = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.kabi.matmul.default, (a, b))


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_fullgraph_compile_has_no_graph_break_and_matches_eager(backend, spy):
    x, w1, w2 = torch.randn(2, 8, 16), torch.randn(16, 32), torch.randn(32, 4)
    explanation = torch._dynamo.explain(mlp_block)(x, w1, w2)
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(mlp_block, backend=backend, fullgraph=True)
    expected = mlp_block(x, w1, w2)
    spy.calls.clear()
    torch.testing.assert_close(compiled(x, w1, w2), expected)
    # The compiled graph calls kabi's front at run time, which ran the forced (spy) kernel for both products.
    assert spy.calls == [((2, 8, 16), (16, 32)), ((2, 8, 32), (32, 4))]


def test_compiled_graph_holds_the_custom_op_and_follows_dynamic_shapes(untuned):
    counter = GraphCounter()
    compiled = torch.compile(mlp_block, backend=counter, fullgraph=True, dynamic=True)
    w1, w2 = torch.randn(16, 32), torch.randn(32, 4)
    for batch in (3, 5, 9):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(compiled(x, w1, w2), mlp_block(x, w1, w2))
    assert len(counter.graphs) == 1
    assert counter.kabi_calls() == 2


def test_compiled_call_with_out_writes_it(untuned):
    def product_into(a, b, out):
        return kabi.ops.matmul(a, b, out=out)

    a, b = torch.randn(4, 3), torch.randn(3, 5)
    out = torch.empty(4, 5)
    result = torch.compile(product_into, backend="aot_eager", fullgraph=True)(a, b, out)
    torch.testing.assert_close(out, a @ b)
    assert result.data_ptr() == out.data_ptr()


def test_compiled_call_keeps_kabi_errors(untuned):
    compiled = torch.compile(lambda a, b: kabi.ops.matmul(a, b), backend="aot_eager", fullgraph=True)
    with pytest.raises(Exception, match="b's dimension K"):
        compiled(torch.randn(4, 3), torch.randn(5, 2))


def test_kabi_import_leaves_dynamo_unloaded_and_compile_still_traces_kabi_ops():
    # A fresh interpreter: importing kabi must not import torch._dynamo (seconds), and the first torch.compile must
    # still see kabi.ops.matmul as traceable.
    program = """
import sys
import torch, kabi
assert "torch._dynamo" not in sys.modules, "kabi imported torch._dynamo"
f = torch.compile(lambda a, b: kabi.ops.matmul(a, b) * 2, backend="eager", fullgraph=True)
a, b = torch.randn(4, 3), torch.randn(3, 2)
torch.testing.assert_close(f(a, b), (a @ b) * 2)
print("ok")
"""
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"


def test_dispatch_modes_and_tracing_see_the_custom_op(spy):
    # The custom op's Autograd kernel calls kabi's front directly only for plain tensors outside any dispatch mode;
    # a mode (here make_fx's proxy tracing) must still see torch.ops.kabi.matmul and never run a kernel.
    from torch.fx.experimental.proxy_tensor import make_fx

    a, b = torch.randn(4, 3), torch.randn(3, 5)
    for mode in ("real", "fake", "symbolic"):
        graph = make_fx(lambda x, y: torch.ops.kabi.matmul(x, y), tracing_mode=mode)(a, b)
        targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
        assert targets == [torch.ops.kabi.matmul.default], mode
    assert spy.calls == [((4, 3), (3, 5))]  # only make_fx's real mode runs the op, on the real inputs
    traced = make_fx(lambda x, y: torch.ops.kabi.matmul(x, y), tracing_mode="fake")(a, b)
    torch.testing.assert_close(traced(a, b), a @ b)
    assert len(spy.calls) == 2


def test_data_dependent_row_count_compiles_without_a_break(untuned):
    def positive_rows_product(x, w):
        return kabi.ops.matmul(x[x[:, 0] > 0], w)

    x, w = torch.randn(16, 6), torch.randn(6, 4)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        compiled = torch.compile(positive_rows_product, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(x, w), positive_rows_product(x, w))
