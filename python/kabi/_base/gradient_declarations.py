"""An op's declared gradient: the ``[gradient]`` table of its declaration, checked and compiled.

An op's gradient is declared in its file, or the op is declared not differentiable (``differentiable = false``).
``[gradient]`` holds one Python expression per differentiable input, its gradient; ``[gradient.let]`` names
intermediates the expressions share (each evaluated only when a gradient that needs it is)::

    [gradient]
    a = "matmul_summed(grad, b.mH, a.shape)"
    b = "matmul_summed(a.mH, grad, b.shape)"

An expression may use the op's inputs (an absent optional one is None) and attributes (an enum by its value name),
``grad`` (the output's gradient; ``grad_<output>`` for each output of an op with several), the intermediates, the
kabi ops by name (called as ``torch.ops.kabi.<op>``, so they dispatch through kabi and stay differentiable), the
functions of ``GRADIENT_FUNCTIONS`` and the tensor attributes of ``GRADIENT_TENSOR_ATTRIBUTES``; constants,
arithmetic, comparisons and ``x if condition else y``. Nothing else: an unknown name, a syntax error, a gradient of
something that is not an input, intermediates that refer to each other in a cycle or one no gradient uses fail at
load time, naming the file and the field. An input read only through ``.shape`` is not kept for the backward, its
shape is. kabi.ops._autograd evaluates the expressions, compiled here once.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any, Collection, Iterable, Mapping

from .registry_fields import TableReader, display_path

__all__ = ["GRADIENT_FUNCTIONS", "GRADIENT_TENSOR_ATTRIBUTES", "GradientExpression", "GradientSpec", "parse_gradient"]

# The functions a gradient expression may call besides kabi ops; kabi.ops._gradient_functions implements them.
GRADIENT_FUNCTIONS = ("activation_grad", "grouped_weight_grad", "matmul_summed", "rows", "sum_to")
# The tensor methods and properties a gradient expression may use.
GRADIENT_TENSOR_ATTRIBUTES = ("conj", "mH", "mT", "reshape", "shape", "squeeze", "sum", "transpose", "unsqueeze")


@dataclass(frozen=True)
class GradientExpression:
    """One expression of ``[gradient]`` or ``[gradient.let]``, compiled: ``reads`` are the names whose values it
    uses, ``reads_shape_of`` those it uses only through ``.shape``."""

    field: str
    text: str
    code: CodeType
    reads: frozenset[str]
    reads_shape_of: frozenset[str]


@dataclass(frozen=True)
class GradientSpec:
    """An op's declared gradient: the expression of each differentiable input's gradient (by input name), the
    intermediates they share (``[gradient.let]``, by name), the op's input names, the name each output's gradient
    has in the expressions, and the kabi ops they call."""

    gradients: Mapping[str, GradientExpression]
    intermediates: Mapping[str, GradientExpression]
    input_names: tuple[str, ...]
    grad_names: tuple[str, ...]
    ops: frozenset[str]

    def inputs_read(self, targets: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
        """The inputs whose values, and those whose shapes only, the gradients of ``targets`` read (through the
        intermediates they use): what a backward of those gradients must keep from the forward."""
        values: set[str] = set()
        shapes: set[str] = set()
        pending = [self.gradients[target] for target in targets]
        seen: set[str] = set()
        while pending:
            expression = pending.pop()
            values |= expression.reads
            shapes |= expression.reads_shape_of
            for name in (expression.reads | expression.reads_shape_of) & (self.intermediates.keys() - seen):
                seen.add(name)
                pending.append(self.intermediates[name])
        inputs = set(self.input_names)
        return frozenset(values & inputs), frozenset((shapes - values) & inputs)


def parse_gradient(path: Path, table: Mapping[str, Any], schema: Mapping[str, Any], ops: Collection[str]) -> GradientSpec:
    """Parse and compile a ``[gradient]`` table of the file at ``path`` for an op of ``schema`` (as
    ``_core.op_schema`` gives it) whose expressions may call the kabi ops ``ops``; ``RegistryError`` naming the
    file and the field for anything the format does not allow."""
    reader = TableReader(path, table, "gradient.")
    op = schema["name"]
    inputs = tuple(tensor["name"] for tensor in schema["inputs"])
    attributes = tuple(attribute["name"] for attribute in schema["attributes"])
    outputs = tuple(tensor["name"] for tensor in schema["outputs"])
    grad_names = ("grad",) if len(outputs) == 1 else tuple(f"grad_{output}" for output in outputs)
    let_reader = reader.child("let") if "let" in table else TableReader(path, {}, "gradient.let.")
    taken = {
        **{name: "a kabi op" for name in ops},
        **{name: "a gradient function" for name in GRADIENT_FUNCTIONS},
        **{name: f"an input of {op}" for name in inputs},
        **{name: f"an attribute of {op}" for name in attributes},
        **{name: "an output's gradient" for name in grad_names},
    }
    for name in let_reader.table:
        if name in taken:
            raise let_reader.fail(name, f"{name!r} is already {taken[name]}; give the intermediate another name")
        if not name.isidentifier():
            raise let_reader.fail(name, f"expected a Python identifier as the intermediate's name, got {name!r}")
    targets = [name for name in table if name != "let"]
    if not targets:
        raise TableReader(path, table).fail("gradient", f"declares no input's gradient; expected an expression for one "
                                                    f"or more of {', '.join(inputs)}")
    for name in targets:
        if name not in inputs:
            raise reader.fail(name, f"{name!r} is not an input of {op}; a gradient is declared for its inputs: "
                                    f"{', '.join(inputs)}")
    vocabulary = (
        f"the inputs ({', '.join(inputs)}), "
        + (f"the attributes ({', '.join(attributes)}), " if attributes else "")
        + f"{' and '.join(grad_names)}, "
        + (f"the intermediates of [gradient.let] ({', '.join(let_reader.table)}), " if let_reader.table else "")
        + f"the kabi ops ({', '.join(sorted(ops))}) and the functions {', '.join(GRADIENT_FUNCTIONS)}"
    )
    known = frozenset(taken) | frozenset(let_reader.table)
    gradients = {name: _gradient_expression(reader, name, known, vocabulary) for name in targets}
    intermediates = {name: _gradient_expression(let_reader, name, known, vocabulary) for name in let_reader.table}
    _check_intermediates(let_reader, gradients, intermediates)
    called = set().union(*(expression.reads for expression in [*gradients.values(), *intermediates.values()]))
    return GradientSpec(gradients, intermediates, inputs, grad_names, frozenset(called & set(ops)))


# The Python a gradient expression may be written in: calls, names, tensor attributes, constants, tuples, indexing,
# arithmetic, comparisons, and/or/not, and x if condition else y.
_EXPRESSION_NODES = (
    ast.Expression, ast.Call, ast.keyword, ast.Name, ast.Load, ast.Attribute, ast.Constant, ast.Tuple, ast.Subscript,
    ast.Slice, ast.UnaryOp, ast.UAdd, ast.USub, ast.Not, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow,
    ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.IfExp,
)


def _gradient_expression(reader: TableReader, field: str, known: frozenset[str], vocabulary: str) -> GradientExpression:
    text = reader.get(field, str)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise reader.fail(field, f"not a valid Python expression: {error.msg} in {text!r}") from None
    shape_reads = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.MatMult):
            raise reader.fail(field, "'@' would run torch's product; call the kabi op: matmul(x, y)")
        if not isinstance(node, _EXPRESSION_NODES):
            raise reader.fail(field, f"{type(node).__name__} is not allowed in a gradient expression: {text!r}")
        if isinstance(node, ast.Attribute):
            if node.attr not in GRADIENT_TENSOR_ATTRIBUTES:
                raise reader.fail(field, f"unknown tensor attribute .{node.attr}; a gradient expression may use "
                                         f"{', '.join('.' + name for name in GRADIENT_TENSOR_ATTRIBUTES)}")
            if node.attr == "shape" and isinstance(node.value, ast.Name):
                shape_reads.add(id(node.value))
        if isinstance(node, ast.Name) and node.id not in known:
            raise reader.fail(field, f"unknown name {node.id!r}; a gradient expression may use {vocabulary}")
    names = [node for node in ast.walk(tree) if isinstance(node, ast.Name)]
    reads = frozenset(node.id for node in names if id(node) not in shape_reads)
    code = compile(tree, f"{display_path(reader.path)}: {reader.prefix}{field}", "eval")
    return GradientExpression(f"{reader.prefix}{field}", text, code, reads,
                              frozenset(node.id for node in names) - reads)


def _check_intermediates(let_reader: TableReader, gradients: Mapping[str, GradientExpression],
                         intermediates: Mapping[str, GradientExpression]) -> None:
    """No intermediate depends on itself through others, and every one is used by a gradient."""

    def uses(expression: GradientExpression) -> list[str]:
        return sorted((expression.reads | expression.reads_shape_of) & intermediates.keys())

    finished: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise let_reader.fail(cycle[0], f"the intermediates {' -> '.join(cycle)} refer to each other in a cycle")
        if name not in finished:
            for used in uses(intermediates[name]):
                visit(used, path + [name])
            finished.add(name)

    for name in intermediates:
        visit(name, [])
    reached = set()
    pending = [used for expression in gradients.values() for used in uses(expression)]
    while pending:
        name = pending.pop()
        if name not in reached:
            reached.add(name)
            pending.extend(uses(intermediates[name]))
    for name in intermediates:
        if name not in reached:
            raise let_reader.fail(name, "no gradient uses this intermediate; remove it")
