"""The schema rules for ops whose inputs come in forms (grouped_mm): a first dimension that may be left out
("[E?, R, K]"), an optional input's presence condition ("offs?(x.rank == 2)") and the offsets value rule
("[E] int32 offsets(R)"): parsed by the core, refused with a message naming the part when malformed, and followed
by the Python shape rule (the fake implementation under torch.compile) as by the core."""

import pytest

import kabi
from kabi import _core
from kabi.ops._schema import op_schema

GROUPED = "grouped_mm"


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("x: [R, E?, K] float32 -> out: [R] float32", r"x: only the first of two or more dimensions may be left out"),
        ("x: [E?] float32 -> out: [E] float32", r"x: only the first of two or more dimensions may be left out"),
        ("x: [E?, R, K] | [R] float32, w: [E, K] float32 -> out: [E, K] float32",
         r"x: a tensor with several shapes cannot leave out its first dimension"),
        ("x: [R, K] | [E?, R, K] float32 -> out: [R, K] float32",
         r"x: a tensor with several shapes cannot leave out its first dimension"),
        ("x: [R, K] float32 -> out: [E?, R] float32", r"output out: E\? is no required input's optional first"),
        ("x: [R, K] float32, o?(y.rank == 2): [R] int32 -> out: [R] float32",
         r"o's presence condition \"y.rank == 2\": y is not a required input tensor declared before o"),
        ("x: [R, K] float32, o?(x.size == 2): [R] int32 -> out: [R] float32", r"expected input.rank == N"),
        ("x: [R, K] float32, o?(x.rank == two): [R] int32 -> out: [R] float32", r"the rank must be an integer"),
        ("x: [R, K] float32, o(x.rank == 2): [R] int32 -> out: [R] float32",
         r"only an optional input \(\"name\?\"\) takes a presence condition"),
        ("x: [R, K] float32, o?: [R] float32 offsets(R) -> out: [R] float32", r"o: offsets are int32 or int64"),
        ("x: [R, K] float32, o?: [E] int32 offsets(Q) -> out: [R] float32", r"Q is no dimension of an earlier"),
        ("x: [R, K] float32, o?: [E] int32 sorted(R) -> out: [R] float32", r"expected offsets\(DIM\)"),
        ("x: [R, K] float32, o?: [E, F] int32 offsets(R) -> out: [R] float32", r"offsets are a 1-D tensor"),
    ],
)
def test_malformed_form_rules_are_reported_by_the_core(schema, message):
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        _core.register_op("test_schema_forms_malformed", schema)


def test_the_core_reports_the_rules_and_python_reads_them():
    parsed = {tensor["name"]: tensor for tensor in _core.op_schema(GROUPED)["inputs"]}
    assert parsed["x"]["leading_dim_optional"] and not parsed["w"]["leading_dim_optional"]
    assert parsed["offs"]["present_with"] == ("x", 2) and parsed["offs"]["offsets_of"] == "R"
    schema = op_schema(GROUPED)
    assert schema.value_checked_inputs == ("offs",)
    assert str(schema) == "x: [E?, R, K], w: [E, K, N], offs: [E] -> out: [E?, R, N]"


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        ([(30, 16), (4, 16, 8), (4,)], (30, 8)),
        ([(4, 7, 16), (4, 16, 8), None], (4, 7, 8)),
        ([(0, 16), (1, 16, 8), (1,)], (0, 8)),
    ],
)
def test_the_python_shape_rule_follows_the_forms(shapes, expected):
    assert op_schema(GROUPED).output_shapes(GROUPED, shapes) == [expected]


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ([(30, 16), (4, 16, 8), None], "offs is required when x has rank 2"),
        ([(4, 7, 16), (4, 16, 8), (4,)], "offs must be absent unless x has rank 2"),
        ([(5, 7, 16), (4, 16, 8), None], "dimension E"),
        ([(7, 16), (4, 16, 8), (3,)], "dimension E"),
        ([(2, 4, 7, 16), (4, 16, 8), None], r"expected \[E\?, R, K\] \(rank 2 or 3\)"),
    ],
)
def test_the_python_shape_rule_refuses_what_the_core_refuses(shapes, message):
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        op_schema(GROUPED).output_shapes(GROUPED, shapes)
