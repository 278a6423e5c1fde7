#!/usr/bin/env python3
"""Fits the compute model's closed form for fused attention kernels on GPUs with asynchronous
tensor cores (compute/compute_model.h) to cuDNN's published kernel rates
(tests/data/compute/cudnn-sdpa/, cudnn-frontend's SDPA training benchmark on H200, GB200, GB300).

Per pass (forward; backward), the share of the dense bf16 peak a kernel reaches is

    eta = F * k / (k + k_half) * phi / (phi + c * peak / exp_rate)

k: keys per query row (s/2 causal, s unmasked, about w under a sliding window of w); phi: the
kernel's FLOPs per exponential (2 (d_qk + d_v) forward, 2.5 times that backward: one exp per
query-key pair in each); peak / exp_rate: the FLOPs the tensor cores do in the time of one
exponential on the GPU's special-function units. F (at most 1), k_half and c are fitted by
least squares on log(eta) (F in closed form, k_half and c on a grid), over every bf16 row with a
non-deterministic backward. Also prints each row's error and, leaving each model's shapes out in turn, the error
on them of the constants fitted to the others.

Usage: tools/fit-attention.py [--rows]   (run from the repository root)
"""
import csv
import glob
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests/data/compute/cudnn-sdpa")
# The presets whose GPU each file's `gpu_name` is (their bf16 peak and exponential rate).
PRESETS = {"NVIDIA H200": "hgx-h200.json", "NVIDIA GB200": "gb200-nvl72.json", "NVIDIA GB300": "gb300-nvl72.json"}
PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def rate(text, unit):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kMGTP]?)" + re.escape(unit) + r"\s*", text)
    if not m:
        sys.exit(f"fit-attention: cannot read {text!r} as {unit}")
    return float(m.group(1)) * PREFIX[m.group(2)]


def gpu_spec(preset):
    with open(os.path.join(ROOT, "topologies", preset)) as f:
        d = json.load(f)
        gpu = d["gpu"] if "gpu" in d else d["node"]["gpu"]
    return rate(gpu["peak"]["bf16"], "FLOP/s"), rate(gpu["exponentials"], "op/s")


def rows():
    specs = {name: gpu_spec(p) for name, p in PRESETS.items()}
    out = []
    for path in sorted(glob.glob(os.path.join(DATA, "*.csv"))):
        for r in csv.DictReader(open(path)):
            if r["data_type"] != "bfloat16" or r["success"] != "True" or r["deterministic_bwd"] != "False":
                continue
            s, causal = int(r["q_seqlen"]), r["attn_mask"] == "top_left"
            window = int(r["sliding_window_size"]) if r["sliding_window_size"] else 0
            if window:
                keys = window - window * window / (2 * s) if causal else window
            else:
                keys = (s + 1) / 2 if causal else s
            if r.get("profile_pass") in ("fwd", "bwd"):
                passes = [(r["profile_pass"], float(r["tflops"]))]
            else:
                passes = [("fwd", float(r["fwd_tflops"])), ("bwd", float(r["bwd_tflops"]))]
            peak, exp_rate = specs[r["gpu_name"]]
            d = int(r["head_dim_qk"]) + int(r["head_dim_vo"])
            for p, tflops in passes:
                if tflops <= 0:
                    continue
                out.append({"file": os.path.basename(path), "model": os.path.basename(path).split("-")[0],
                            "gpu": r["gpu_name"].replace("NVIDIA ", ""), "pass": p, "s": s, "keys": keys,
                            "mask": "causal" if causal else "none", "window": window,
                            "d": f"{r['head_dim_qk']}/{r['head_dim_vo']}",
                            "shape_form": shape_form(int(r["head_dim_qk"]), s * s * int(r["head_dim_qk"]) *
                                                     int(r["batch_size"]) * int(r["num_q_heads"])),
                            "phi": 2.0 * d * (1.0 if p == "fwd" else 2.5), "flops_per_exp_time": peak / exp_rate,
                            "eta": tflops * 1e12 / peak})
    return out


def shape_form(d_qk, volume):
    """The default closed form's share of the peak (eta_attention 0.55 and the GEMM shape
    saturation on the per-head Q.K^T product: compute/gemm_efficiency.h), for comparison."""
    u = d_qk / (d_qk + 32)
    return 0.55 * u / (1 + u * 2**30 / volume)


def shape_terms(x, k_half, c):
    return x["keys"] / (x["keys"] + k_half) * x["phi"] / (x["phi"] + c * x["flops_per_exp_time"])


def fit(points):
    """Least squares on log(eta): F in closed form (at most 1) for each (k_half, c) of a grid (k_half 0-3000
    by 25, c 0-2 by 0.02), then a finer grid around the best (k_half by 1, c by 0.005)."""
    def best_of(grid):
        best = None
        for k_half, c in grid:
            logs = [math.log(x["eta"] / shape_terms(x, k_half, c)) for x in points]
            log_f = min(sum(logs) / len(logs), 0.0)  # F at most 1: a share of the peak
            sse = sum((v - log_f) ** 2 for v in logs)
            if best is None or sse < best[0] - 1e-12:
                best = (sse, math.exp(log_f), k_half, c)
        return best
    _, _, k0, c0 = best_of([(k, ci / 50) for k in range(0, 3001, 25) for ci in range(0, 101)])
    fine = [(k, round(c0 + ci / 200, 3)) for k in range(max(0, k0 - 25), k0 + 26)
            for ci in range(-4, 5) if c0 + ci / 200 >= 0]
    _, f, k_half, c = best_of(fine)
    return f, k_half, c


def error(x, f, k_half, c):
    return f * shape_terms(x, k_half, c) / x["eta"] - 1


def summary(errors):
    a = sorted(abs(e) for e in errors)
    return f"median |error| {100 * a[len(a) // 2]:.1f}%, mean {100 * sum(a) / len(a):.1f}%, worst {100 * a[-1]:.1f}%"


def rms_log(points, share):
    return math.sqrt(sum(math.log(share(x) / x["eta"]) ** 2 for x in points) / len(points))


def median(values):
    v = sorted(values)
    return v[len(v) // 2]


def main():
    points = rows()
    print("the default form (eta_attention 0.55, shape saturation): median signed error")
    for p in ("fwd", "bwd"):
        for gpu in sorted({x["gpu"] for x in points}):
            pp = [x for x in points if x["pass"] == p and x["gpu"] == gpu]
            full = [x["shape_form"] / x["eta"] - 1 for x in pp if not x["window"]]
            win = [x["shape_form"] / x["eta"] for x in pp if x["window"]]
            print(f"  {p} {gpu:6} {100 * median(full):+.0f}% without a window"
                  + (f", {min(win):.1f}-{max(win):.1f} times the measured rate under one" if win else ""))
    fitted = {}
    for p in ("fwd", "bwd"):
        pp = [x for x in points if x["pass"] == p]
        f, k_half, c = fit(pp)
        fitted[p] = (f, k_half, c)
        print(f"{p}: F = {f:.3f}, k_half = {k_half}, c = {c:.2f} over {len(pp)} rows: "
              f"{summary([error(x, f, k_half, c) for x in pp])}")
        for gpu in sorted({x["gpu"] for x in pp}):
            print(f"  {gpu:6} {summary([error(x, f, k_half, c) for x in pp if x['gpu'] == gpu])}")
        for model in sorted({x["model"] for x in pp}):
            rest = [x for x in pp if x["model"] != model]
            held = [x for x in pp if x["model"] == model]
            g = fit(rest)
            print(f"  {model:8} held out ({len(held):2} rows): {summary([error(x, *g) for x in held])}"
                  f" (F {g[0]:.3f}, k_half {g[1]}, c {g[2]:.2f})")
        if "--rows" in sys.argv:
            for x in sorted(pp, key=lambda x: (x["gpu"], x["model"], x["mask"], x["s"])):
                print(f"    {x['gpu']:6} {x['model']:8} {x['mask']:6} w {x['window'] or '-':>5} d {x['d']:7} "
                      f"s {x['s']:6} measured {x['eta']:.3f} model {f * shape_terms(x, k_half, c):.3f} "
                      f"{100 * error(x, f, k_half, c):+.0f}%")
    print(f"rms log error over both passes: default form {rms_log(points, lambda x: x['shape_form']):.2f}, "
          f"fitted {rms_log(points, lambda x: fitted[x['pass']][0] * shape_terms(x, *fitted[x['pass']][1:])):.2f}")


if __name__ == "__main__":
    main()
