#!/usr/bin/env python3
"""Times the attention core on one GPU and writes calibrate/FORMAT.md `"kind":"attention"` lines.

What it measures: PyTorch's scaled_dot_product_attention, causal, bf16, forward and the backward
alone, for each head dimension and sequence length asked for, with every fused backend the GPU
has. The kernels are named as the compute model names them:
  - "fused": the GPU's own kernel: cuDNN's on Hopper and Blackwell (compute capability 9.0 and
    later), FlashAttention-2 on Ampere and Ada;
  - "flash2": FlashAttention-2 (PyTorch's flash backend) on Hopper and Blackwell, where it leaves
    the asynchronous tensor cores unused.
FLOPs are counted as the compute model counts them (sim/model/layer_operators.h): forward
2 * (s*s/2) * heads * batch * (d_qk + d_v) for a causal mask, the backward 2.5 times that.
Each point fills the GPU with about --tokens query tokens (batch = tokens / s, at least 1).

Pass the output to `parallax train --gemm-table FILE` (with the GEMM lines of parallax-nccl-bench,
or alone): the attention core then runs at the measured rates (measured_attention_table.h).

Exit codes: 0 measured; 2 bad arguments; 3 no usable GPU (no PyTorch, or no CUDA device);
1 every point failed. --plan prints the points and their FLOPs without a GPU.
"""
import argparse
import json
import math
import os
import socket
import statistics
import sys
import time


def parse_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated positive integers, found %r" % text)
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("expected comma-separated positive integers, found %r" % text)
    return values


def forward_flops(batch, heads, s, d_qk, d_v):
    # Causal: half of the s*s query-key pairs, as the compute model counts them.
    return 2.0 * (s * s / 2.0) * heads * batch * (d_qk + d_v)


def plan(args):
    for d in args.head_dims:
        for s in args.seqs:
            batch = max(1, args.tokens // s)
            yield {"batch": batch, "heads": args.heads, "s": s, "d": d,
                   "flops_forward": forward_flops(batch, args.heads, s, d, d)}


def fail_no_gpu(reason):
    print("attention-bench: no usable GPU: %s" % reason, file=sys.stderr)
    sys.exit(3)


def time_calls(torch, fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)  # µs
    return times


def backends(torch, capability):
    from torch.nn.attention import SDPBackend
    found = []
    if capability[0] >= 9:
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            found.append(("fused", "cudnn", SDPBackend.CUDNN_ATTENTION))
        found.append(("flash2", "flash", SDPBackend.FLASH_ATTENTION))
    else:
        found.append(("fused", "flash", SDPBackend.FLASH_ATTENTION))
    return found


def measure_point(torch, point, backend, args):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    b, h, s, d = point["batch"], point["heads"], point["s"], point["d"]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    with sdpa_kernel([backend]):
        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        fwd = time_calls(torch, forward, args.warmup, args.iters)
        out = forward()
        grad = torch.randn_like(out)
        bwd = time_calls(torch, lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True),
                         args.warmup, args.iters)
    return fwd, bwd


def line(run, kernel, backend_name, point, pass_name, times, flops, args):
    mean = statistics.fmean(times)
    return {"kind": "attention", "run": run, "kernel": kernel, "backend": backend_name, "dtype": "bf16",
            "batch": point["batch"], "heads": point["heads"], "s_q": point["s"], "s_kv": point["s"],
            "d_qk": point["d"], "d_v": point["d"], "causal": True, "pass": pass_name,
            "warmup": args.warmup, "iters": args.iters, "time_us": round(mean, 3),
            "time_us_min": round(min(times), 3), "time_us_max": round(max(times), 3),
            "time_us_median": round(statistics.median(times), 3),
            "tflops": round(flops / (mean * 1e-6) / 1e12, 3)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", help="JSON-lines file to append to (FORMAT.md)")
    p.add_argument("--head-dims", type=parse_list, default=parse_list("64,128"))
    p.add_argument("--seqs", type=parse_list, default=parse_list("1024,2048,4096,8192,16384"))
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--tokens", type=int, default=65536, help="query tokens per call (batch = tokens / s)")
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("--time-limit", type=float, default=0, help="seconds; stop after the current point (0: none)")
    p.add_argument("--plan", action="store_true", help="print the points and their FLOPs, measure nothing")
    args = p.parse_args()
    if args.heads <= 0 or args.tokens <= 0 or args.warmup < 0 or args.iters <= 0:
        p.error("--heads, --tokens and --iters must be positive, --warmup non-negative")
    if args.plan:
        for point in plan(args):
            print(json.dumps(point))
        return 0
    if not args.output:
        p.error("-o FILE is required (or --plan)")
    try:
        import torch
    except ImportError:
        fail_no_gpu("PyTorch is not installed for %s" % sys.executable)
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        fail_no_gpu("PyTorch %s sees no CUDA device" % torch.__version__)
    capability = torch.cuda.get_device_capability(0)
    if capability[0] < 8:
        fail_no_gpu("%s (compute capability %d.%d) has no fused bf16 attention" %
                    ((torch.cuda.get_device_name(0),) + tuple(capability)))
    start = time.time()
    run = "%s-%s-%d-attention" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), socket.gethostname(), os.getpid())
    failures = measured = 0
    with open(args.output, "a") as out:
        meta = {"kind": "meta", "run": run, "harness": "attention-bench.py", "date": run[:20],
                "hosts": [socket.gethostname()], "ranks": 1, "nodes": 1, "gpu": torch.cuda.get_device_name(0),
                "gpu_count": 1, "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
                "cudnn": str(torch.backends.cudnn.version()), "command": " ".join(sys.argv)}
        out.write(json.dumps(meta) + "\n")
        out.flush()
        for kernel, name, backend in backends(torch, capability):
            for point in plan(args):
                if args.time_limit and time.time() - start > args.time_limit:
                    print("attention-bench: time limit reached; stopping", file=sys.stderr)
                    return 0 if measured else 1
                label = "%s d %d s %d batch %d" % (name, point["d"], point["s"], point["batch"])
                try:
                    fwd, bwd = measure_point(torch, point, backend, args)
                except Exception as e:  # a backend that does not take this shape
                    failures += 1
                    print("attention-bench: %s failed: %s" % (label, str(e).splitlines()[0] if str(e) else e),
                          file=sys.stderr)
                    torch.cuda.empty_cache()
                    continue
                flops = point["flops_forward"]
                for pass_name, times, f in (("forward", fwd, flops), ("backward", bwd, 2.5 * flops)):
                    out.write(json.dumps(line(run, kernel, name, point, pass_name, times, f, args)) + "\n")
                out.flush()
                measured += 1
                print("attention-bench: %s: forward %.0f, backward %.0f TFLOP/s" %
                      (label, flops / (statistics.fmean(fwd) * 1e-6) / 1e12,
                       2.5 * flops / (statistics.fmean(bwd) * 1e-6) / 1e12), file=sys.stderr)
                torch.cuda.empty_cache()
    print("attention-bench: %d points measured, %d failed, %.0f s" % (measured, failures, time.time() - start),
          file=sys.stderr)
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())
