"""Facts a GPU machine answers in seconds, for the transformer and for
(% of peak, energy): dense GEMM throughput per precision (the measured peak beside the datasheet
figure), which scaled_dot_product_attention kernel runs for char-gpt-6l's attention shape in
bf16 and fp32 (the engine calls the same ATen op with the same arguments), and whether NVML's
energy counter is readable. One JSON object on stdout."""
import json
import subprocess
import time

import torch


def gemm_tflops(dtype, n=8192, reps=20, tf32=False):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000 / reps
    return 2 * n**3 / seconds / 1e12


def sdpa_kernels(dtype):
    q, k, v = (torch.randn(64, 6, 256, 64, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    f = torch.nn.functional.scaled_dot_product_attention
    f(q, k, v, is_causal=True).sum().backward()  # warm-up
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        f(q, k, v, is_causal=True).sum().backward()
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    return [n for n in names if any(s in n.lower() for s in ("flash", "fmha", "attention", "efficient", "cudnn"))]


def energy():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,power.draw,power.limit,total_energy_consumption",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or out.stderr.strip()
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"nvidia-smi failed: {e}"


out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
       "nvml_energy_before": energy()}
t0 = time.time()
out["gemm_tflops"] = {"bf16": gemm_tflops(torch.bfloat16), "fp16": gemm_tflops(torch.float16),
                      "tf32": gemm_tflops(torch.float32, tf32=True), "fp32": gemm_tflops(torch.float32, n=4096)}
out["sdpa_kernels"] = {"bf16": sdpa_kernels(torch.bfloat16), "fp32": sdpa_kernels(torch.float32)}
out["seconds"] = time.time() - t0
out["nvml_energy_after"] = energy()
print(json.dumps(out, indent=1))
