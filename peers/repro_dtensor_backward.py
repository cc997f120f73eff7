"""DTensor's backward failures found by `spmd-check registry dtensor`
(SPEC.md §22.6): ops whose forward strategy is registered but whose
gradient DTensor cannot compute, or hands back as a plain tensor; and
`DTensor.from_local` onto Partial(avg), Partial(max) and Partial(min),
whose backward hands every rank's local tensor the whole cotangent
(Partial -> Replicate, as its docstring tabulates), where the derivative
of the mean is 1/n of it and that of the max or min is zero on every rank
but the one holding the extreme. Each case is a plain program on a fake
2-rank process group (LocalTensorMode); this prints what DTensor does
and exits 0 while every failure stands.

    /path/to/torch-2.14.1/python peers/repro_dtensor_backward.py
"""
import warnings

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

warnings.filterwarnings("ignore")
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
mesh = init_device_mesh("cpu", (2,))
F = torch.nn.functional

CASES = [
    ("hardtanh", lambda x: F.hardtanh(x), (2,), 0),
    ("relu6", lambda x: F.relu6(x), (2,), 0),
    ("hardshrink", lambda x: F.hardshrink(x), (2,), 0),
    ("softshrink", lambda x: F.softshrink(x), (2,), 0),
    ("hardsigmoid", lambda x: F.hardsigmoid(x), (2,), 0),
    ("prod(x, 0) of a shard of dim 1", lambda x: torch.prod(x, 0), (2, 2), 1),
    ("mvlgamma(x + 3, 2)", lambda x: torch.mvlgamma(x + 3, 2), (2,), 0),
    ("copysign(x, x)", lambda x: torch.copysign(x, x), (2,), 0),
    ("sgn", lambda x: torch.sgn(x), (2,), 0),
]

still = 0
for name, f, shape, dim in CASES:
    with LocalTensorMode(2) as mode:
        local = mode.rank_map(lambda r: (torch.arange(1.0, 1.0 + torch.Size(shape).numel(), dtype=torch.float64)
                                         .reshape(shape) * (r + 1) / 4))
        x = DTensor.from_local(local, mesh, [Shard(dim)], run_check=False).requires_grad_()
        try:
            y = f(x)
            (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
        except Exception as e:
            still += 1
            print(f"{name}: the forward runs; its backward raises {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        if isinstance(g, DTensor):
            print(f"{name}: the gradient is a DTensor ({g.placements})")
        else:
            still += 1
            print(f"{name}: the gradient is a {type(g).__name__}, not a DTensor")

# from_local(x, [Partial(k)]): the global value is the mean / max / min of
# the ranks' tensors, so its gradient with respect to rank r's tensor is
# torch's gradient of that function of the stacked tensors, slice r.
PARTIALS = ["avg", "max", "min"]
xs = [torch.tensor([1.0, -2.0], dtype=torch.float64), torch.tensor([3.0, -4.0], dtype=torch.float64)]
ct = torch.tensor([1.0, 1.0], dtype=torch.float64)
for k in PARTIALS:
    stacked = torch.stack(xs).requires_grad_()
    reduce = {"avg": lambda t: t.mean(0), "max": lambda t: t.amax(0), "min": lambda t: t.amin(0)}[k]
    (want,) = torch.autograd.grad(reduce(stacked), stacked, ct)
    with LocalTensorMode(2) as mode:
        local = mode.rank_map(lambda r: xs[r].clone()).requires_grad_()
        y = DTensor.from_local(local, mesh, [Partial(k)], run_check=False)
        ones = DTensor.from_local(mode.rank_map(lambda r: ct.clone()), mesh, [Replicate()], run_check=False)
        (g,) = torch.autograd.grad(y, local, ones)
        got = [g._local_tensors[r].tolist() for r in range(2)]
    ok = got == want.tolist()
    still += not ok
    print(f"from_local(x, [Partial({k!r})]) on x = {[t.tolist() for t in xs]}, cotangent ones: "
          f"the local gradients are {got}; the derivative is {want.tolist()}")
raise SystemExit(0 if still == len(CASES) + len(PARTIALS) else 1)
