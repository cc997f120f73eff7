"""External kernels (SPEC.md §20.4): real float64 code checked exactly.
Each sound kernel has a wrong twin the oracle must reject, naming the
property."""

import pytest

import spmd_check

np = pytest.importorskip("numpy")


def mul(x, y):
    return x * y


def mul_backward(x, y, g):
    return [g * y, g * x]


def mul_backward_off_by_two(x, y, g):
    return [2 * g * y, g * x]


def test_a_correct_kernel_is_proved_sound():
    v = spmd_check.check_kernel(mul, inputs=["P", "R"], output="P", degree=1, backward=mul_backward)
    assert v.sound and v.proof and v.backward_checked, v.summary


def test_its_off_by_two_backward_is_caught_minimally():
    v = spmd_check.check_kernel(mul, inputs=["P", "R"], output="P", degree=1,
                                backward=mul_backward_off_by_two)
    assert v.property == "B3", v.report
    cx = v.counterexample
    by = {val.label: val for val in cx.values}
    # The kernel's gradient for x is twice g * y: recomputed exactly here.
    for r in range(cx.ranks):
        assert by["dx"].per_rank[r] == 2 * by["g"].per_rank[r] * by["y"].per_rank[r]
    assert cx.ranks == 1  # the smallest mesh already shows it


def test_a_wrong_typing_of_a_right_kernel_fails_f2():
    v = spmd_check.check_kernel(mul, inputs=["P", "P"], output="P", degree=1, backward=mul_backward)
    assert v.property == "F2"


def test_names_come_from_the_signature():
    v = spmd_check.check_kernel(mul, inputs=["P", "P"], output="P", degree=1)
    assert [i.label for i in v.counterexample.inputs] == ["x", "y"]
    assert not v.backward_checked


def test_a_kernel_that_rounds_is_undetermined_not_sound():
    v = spmd_check.check_kernel(lambda x: x / 3, inputs=["P"], output="P", degree=1)
    assert v.verdict == "undetermined" and not v.sound
    assert "outside float64's exact window" in v.reason
    # The twin that float64 computes exactly is sound.
    v = spmd_check.check_kernel(lambda x: x / 4, inputs=["P"], output="P", degree=1)
    assert v.sound


def test_a_kernel_that_raises_is_undetermined():
    def boom(x):
        raise RuntimeError("kernel bug")
    v = spmd_check.check_kernel(boom, inputs=["V"], output="V", degree=1)
    assert v.verdict == "undetermined" and "kernel bug" in v.reason


def test_matmul_with_a_shape_function():
    def shape(a, b):
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            raise ValueError("matmul shapes")
        return (a[0], b[1])

    def mm(x, w):
        return x @ w

    ok = spmd_check.check_kernel(mm, inputs=["V", "R"], output="V", degree=1, shape=shape,
                                 backward=lambda x, w, g: [g @ w.T, x.T @ g], scope="small")
    assert ok.sound, ok.summary
    # The twin forgets that W's cotangent is Partial and averages it: wrong.
    bad = spmd_check.check_kernel(mm, inputs=["V", "R"], output="V", degree=1, shape=shape,
                                  backward=lambda x, w, g: [g @ w.T, (x.T @ g) / 2], scope="small")
    assert bad.property == "B3", bad.report


def test_bad_declarations():
    with pytest.raises(spmd_check.BadInput):
        spmd_check.check_kernel(mul, inputs=["P", "R"], output="P", degree=[1])
    with pytest.raises(spmd_check.BadInput):
        spmd_check.check_kernel(mul, inputs=["P", "R"], output="P", degree=17)
    with pytest.raises(spmd_check.BadInput):
        spmd_check.check_kernel(mul, inputs=["P", "Q"], output="P", degree=1)


def test_a_torch_autograd_function_with_a_wrong_backward():
    torch = pytest.importorskip("torch")

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * g  # should be 2 * x * g

    fwd, bwd = spmd_check.torch_kernel(Square.apply)
    v = spmd_check.check_kernel(fwd, backward=bwd, inputs=["V"], output="V", degree=2)
    assert v.property == "B3", v.report
