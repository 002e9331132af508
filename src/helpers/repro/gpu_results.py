"""The recorded GPU results, as text a page prints. Written for chapters 10, 13 and 22; until a
GPU record exists, chapter 22 uses only GPU_SPECS and the reference ratios.

tools/record/gpu.py measures everything the book shows about GPUs in one run on a lent
device and writes one JSON file per part; copied into chapters/data/ they are

    attention_cuda.json    the attention sweep (chapter 22)
    training_cuda.json     seconds to 99.5 % validation exact match, test-set accuracy (ch. 10)
    decoding_cuda.json     greedy decoding with and without the KV cache (chapter 13)
    unit_tests_cuda.json   pytest on tests/test_cuda.py on the GPU
    record_gpu_cuda.json   the run's summary

Every function here reads those files when they are present and otherwise says plainly that
nothing is recorded yet, with the command that records it. Only the plot needs matplotlib.

Chapter 22 uses only the reference chapter's own numbers (REFERENCE_RTX4090, reference_ratios,
GPU_SPECS): until a GPU run is recorded, its GPU section is one sentence. The functions that
read attention_cuda.json wait for that record (an Experiments page once it exists).

"The reference chapter" in this module is the textbook chapter this book reproduces and measures
itself against; the book's introduction describes it (chapters/intro.md, "The reference
chapter").
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from helpers.benchmark import attention_flops, outcome, results_table, score_matrix_bytes
from helpers.repro.paths import records_dir

RECORD_COMMAND = (
    "PYTHONPATH=src timeout -k 10 460 python3 -m tools.record.gpu --device cuda --out OUT_DIR"
)
DEFAULT_DATA = records_dir()

# The reference chapter's own GPU measurement (RTX 4090, B=8, L=1024, d_model=512, h=8, float32
# weights under bfloat16 autocast, mean of 20 calls, absolute max_memory_allocated / 2**20).
REFERENCE_RTX4090 = {
    "gpu": "NVIDIA GeForce RTX 4090",
    "L": 1024,
    "handwritten": {"ms": 2.97, "mib": 712},
    "sdpa_causal": {"ms": 0.25, "mib": 79},
}

# Vendor peak rates, dense (no sparsity): memory bandwidth in TB/s, bfloat16 tensor-core rate
# in TFLOP/s (with float32 accumulation on the RTX 4090).
GPU_SPECS = {
    "NVIDIA H200 NVL": {
        "bandwidth_tb_s": 4.8,
        "bf16_tflops": 835.5,
        "source": "NVIDIA H200 datasheet, H200 NVL: 1,671 TFLOP/s with sparsity, halved",
    },
    "NVIDIA H200": {
        "bandwidth_tb_s": 4.8,
        "bf16_tflops": 989.5,
        "source": "NVIDIA H200 datasheet, H200 SXM: 1,979 TFLOP/s with sparsity, halved",
    },
    "NVIDIA GeForce RTX 4090": {
        "bandwidth_tb_s": 1.008,
        "bf16_tflops": 165.2,
        "source": "NVIDIA Ada GPU architecture whitepaper (FP32 accumulate, dense)",
    },
}


def gpu_file(part: str, data_dir=None) -> Path:
    """For chapters 10, 13 and 22, once a GPU record exists.

    Where the recorded file of one part lives."""
    return Path(data_dir or DEFAULT_DATA) / f"{part}_cuda.json"


def load_gpu_record(part: str, data_dir=None) -> dict | None:
    """For chapters 10, 13 and 22, once a GPU record exists.

    The recorded part ('attention', 'training', 'decoding',
    'unit_tests'), or None when it has not been recorded."""
    path = gpu_file(part, data_dir)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    for key in ("part", "environment", "status"):
        if key not in record:
            raise ValueError(f"{path}: not a record of tools/record/gpu.py (no {key!r})")
    return record


def not_recorded(part: str, what: str) -> str:
    """For chapters 10, 13 and 22, once a GPU record exists.

    The text shown while a part has no recorded file."""
    return (
        f"{what}: not recorded yet (no chapters/data/{part}_cuda.json).\n"
        "On a machine with an NVIDIA GPU, from the repository root, run\n"
        f"    {RECORD_COMMAND}\n"
        f"then copy OUT_DIR/{part}_cuda.json into chapters/data/ and re-execute this chapter."
    )


def recorded_on(record: dict) -> str:
    """For chapters 10, 13 and 22, once a GPU record exists.

    One line: GPU, driver, torch, CUDA, date, status."""
    env = record["environment"]
    line = (
        f"Recorded on {env.get('gpu', env.get('device'))} (driver {env.get('driver', '?')}, "
        f"torch {env.get('torch')}, CUDA {env.get('cuda')}), {env.get('date')}"
    )
    if record.get("quick"):
        line += "\nWARNING: a --quick dry run at tiny sizes, not a measurement"
    status = record.get("status")
    if status != "ok":
        line += f"\nstatus: {status}" + (f" ({record['error']})" if record.get("error") else "")
    return line


def _percent(x) -> str:
    return "-" if x is None else f"{100 * x:.2f} %"


def _test_line(run: dict) -> str:
    test = run.get("test")
    if not test:
        return f"test set: not measured ({run.get('test_error', 'no result')})"
    return (
        f"test set: {_percent(test['exact_match'])} exact match ({test['correct']:,} of "
        f"{test['n']:,}; 95 % interval {_percent(test['low'])} to {_percent(test['high'])})"
    )


def gpu_training_summary(data_dir=None) -> str:
    """For chapter 10, once a GPU record exists.

    The recorded GPU training time of the book's and the reference
    chapter's recipes, with the test-set exact match of the trained models."""
    record = load_gpu_record("training", data_dir)
    if record is None:
        return not_recorded("training", "GPU training time")
    lines = [
        recorded_on(record),
        "Seconds to >= 99.5 % validation exact match (wall clock: data, model, training,",
        "evaluations and the final greedy check, after an untimed warm-up run):",
    ]
    medians = {}
    for name, label in (("book", "book recipe"), ("reference", "reference recipe")):
        runs = [r for r in record.get("runs", []) if r["recipe"] == name]
        if not runs:
            lines.append(f"  {label:<17} not run")
            continue
        secs = [r["seconds"] for r in runs]
        steps = [r["steps"] for r in runs]
        reached = sum(r["reached_target"] for r in runs)
        medians[name] = statistics.median(secs)
        if len(runs) == 1:
            what = f"1 run: {secs[0]:.1f} s, {steps[0]} steps"
        else:
            what = (
                f"{len(runs)} runs: median {medians[name]:.1f} s ({min(secs):.1f}-"
                f"{max(secs):.1f}), {min(steps)}-{max(steps)} steps"
            )
        lines.append(f"  {label:<17} {what}; target reached in {reached} of {len(runs)}")
        lines.append(f"  {'':<17} {_test_line(runs[0])} (run 1)")
    if len(medians) == 2:
        ratio = medians["reference"] / medians["book"]
        lines.append(f"  reference / book: {ratio:.1f}x the time")
    return "\n".join(lines)


def gpu_decoding_summary(data_dir=None) -> str:
    """For chapter 13, once a GPU record exists.

    The recorded GPU decoding times with and without the KV cache."""
    record = load_gpu_record("decoding", data_dir)
    if record is None:
        return not_recorded("decoding", "GPU decoding speed-up")
    cfg = record.get("config", {})
    model = cfg.get("model", {})
    lines = [
        recorded_on(record),
        f"Greedy decoding, batch {cfg.get('batch')}, best of {cfg.get('repeats')} runs, an "
        f"untrained model (d_model {model.get('d_model')}, {model.get('num_layers')} layers):",
        f"{'new tokens':>10}  {'naive ms':>9}  {'cached ms':>9}  {'speed-up':>8}  same tokens",
    ]
    for r in record.get("rows", []):
        lines.append(
            f"{r['new_tokens']:>10}  {r['naive_best_ms']:>9.1f}  {r['cached_best_ms']:>9.1f}  "
            f"{r['speedup']:>7.1f}x  {'yes' if r['identical'] else 'NO'}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- chapter 22


def gpu_spec(name: str) -> dict | None:
    """Used in chapter 22. GPU_SPECS entry for a device name (longest matching key first)."""
    for key in sorted(GPU_SPECS, key=len, reverse=True):
        if key.lower() in (name or "").lower():
            return GPU_SPECS[key]
    return None


def reference_comparison(record: dict, grad: bool = False) -> list[dict]:
    """Used in chapter 22. The reference chapter's protocol on this GPU vs its RTX 4090 numbers:
    one dict per path with ms, MiB and both ratios (this GPU / RTX 4090)."""
    out = []
    for row in record.get("reference_protocol", []):
        if row.get("grad", False) != grad or row["variant"] not in REFERENCE_RTX4090:
            continue
        ref = REFERENCE_RTX4090[row["variant"]]
        item = {
            "variant": row["variant"],
            "L": row["L"],
            "ref_ms": ref["ms"],
            "ref_mib": ref["mib"],
        }
        if "mean_ms" in row:
            item.update(ms=row["mean_ms"], time_ratio=row["mean_ms"] / ref["ms"])
        if "peak_abs_mib" in row:
            item.update(mib=row["peak_abs_mib"], memory_ratio=row["peak_abs_mib"] / ref["mib"])
        if "ms" not in item:
            item["outcome"] = row.get("oom") or row.get("error") or "not measured"
        out.append(item)
    return out


def roofline(record: dict, dtype: str = "bfloat16") -> dict | None:
    """Used in chapter 22. How close the fastest causal SDPA row at the largest L gets to the
    GPU's peak bfloat16 rate, and how far the handwritten path at its largest L is above the
    time it needs just to write and read back one score matrix at full memory bandwidth."""
    spec = gpu_spec(record["environment"].get("gpu", ""))
    rows = [r for r in record.get("rows", []) if r.get("dtype") == dtype and "ms" in r]
    causal = [r for r in rows if r["variant"] not in ("handwritten", "sdpa", "sdpa_premask")]
    if spec is None or not causal:
        return None
    L = max(r["L"] for r in causal)
    best = min((r for r in causal if r["L"] == L), key=lambda r: r["ms"])
    flops = attention_flops(best["B"], best["heads"], L, best["d_model"], causal=True)
    tflops = flops / (best["ms"] / 1000) / 1e12
    result = {
        "gpu": record["environment"]["gpu"],
        "spec": spec,
        "L": L,
        "variant": best["variant"],
        "ms": best["ms"],
        "tflop": flops / 1e12,
        "tflops": tflops,
        "share_of_peak": tflops / spec["bf16_tflops"],
    }
    hand = [r for r in rows if r["variant"] == "handwritten"]
    if hand:
        h = max(hand, key=lambda r: r["L"])
        scores = score_matrix_bytes(h["B"], h["heads"], h["L"], _dtype(dtype))
        floor_ms = 2 * scores / (spec["bandwidth_tb_s"] * 1e12) * 1000
        result["handwritten"] = {"L": h["L"], "ms": h["ms"], "floor_ms": floor_ms}
    return result


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def gpu_attention_summary(data_dir=None) -> str:
    """Used in chapter 22. The recorded GPU attention sweep: the reference chapter's protocol
    against its RTX 4090 numbers, the sweep tables, the kernels, and the roofline."""
    record = load_gpu_record("attention", data_dir)
    if record is None:
        return not_recorded("attention", "GPU attention benchmark")
    cfg = record.get("config", {})
    lines = [recorded_on(record)]
    lines.append(
        f"B={cfg.get('B')}, d_model={cfg.get('d_model')}, h={cfg.get('heads')}, causal; "
        f"{cfg.get('cuda_repeats')} timed runs per row after {cfg.get('warmup')} warm-up calls"
    )
    lines.append("")
    lines.append(
        "The reference chapter's protocol (float32 weights under bfloat16 autocast, mean of 20"
    )
    lines.append("calls, absolute peak) here vs its RTX 4090:")
    for grad in (False, True):
        comp = reference_comparison(record, grad)
        if not comp:
            continue
        lines.append(f"  autograd {'on' if grad else 'off (no_grad)'}:")
        for c in comp:
            if "ms" not in c:
                lines.append(f"    {c['variant']:<12} {c['outcome']}")
                continue
            mem = (
                f"{c['mib']:6.0f} MiB vs {c['ref_mib']:4d} ({c['memory_ratio']:.2f}x)"
                if "mib" in c
                else "memory not measured"
            )
            lines.append(
                f"    {c['variant']:<12} L={c['L']}: {c['ms']:6.3f} ms vs {c['ref_ms']:.2f} "
                f"({c['time_ratio']:.2f}x), {mem}"
            )
    for dtype in cfg.get("dtypes", ["bfloat16", "float32"]):
        rows = [r for r in record.get("rows", []) if r.get("dtype") == dtype]
        if not rows:
            continue
        lines += ["", f"{dtype}: median ms and peak extra MiB over the inputs"]
        lines.append(results_table(rows, ("handwritten", "sdpa", "sdpa_causal")))
        chosen = {}
        for r in rows:
            if r["variant"] in ("sdpa", "sdpa_premask", "sdpa_causal") and r.get("sdpa_backend"):
                chosen.setdefault(r["variant"], set()).add(r["sdpa_backend"])
        if chosen:
            kernels = "; ".join(f"{v}: {', '.join(sorted(b))}" for v, b in chosen.items())
            lines.append(f"kernel PyTorch chose: {kernels}")
        premask = _premask_line(rows)
        if premask:
            lines.append(premask)
        lines.append(
            f"{dtype}: SDPA forced to one backend, median ms (is_causal=True; flash+mask: "
            "FlashAttention with our boolean mask instead)"
        )
        lines.append(_backend_table(rows))
    roof = roofline(record)
    if roof is not None:
        spec = roof["spec"]
        lines += [
            "",
            f"Roofline at L={roof['L']} (bfloat16), {roof['gpu']}: {spec['bf16_tflops']} TFLOP/s "
            f"bfloat16, {spec['bandwidth_tb_s']} TB/s ({spec['source']})",
            f"  fastest causal SDPA ({roof['variant']}): {roof['ms']:.2f} ms for "
            f"{roof['tflop']:.2f} TFLOP = {roof['tflops']:.0f} TFLOP/s, "
            f"{100 * roof['share_of_peak']:.0f} % of the peak",
        ]
        if "handwritten" in roof:
            h = roof["handwritten"]
            lines.append(
                f"  handwritten at L={h['L']}: {h['ms']:.2f} ms; writing and reading one score "
                f"matrix at full bandwidth alone takes {h['floor_ms']:.2f} ms"
            )
    return "\n".join(lines)


def _premask_line(rows: list[dict]) -> str:
    """What inverting the mask on every call costs at the largest L where both rows ran."""
    by = {(r["L"], r["variant"]): r for r in rows if "ms" in r}
    both = [L for (L, v) in by if v == "sdpa" and (L, "sdpa_premask") in by]
    if not both:
        return ""
    L = max(both)
    a, b = by[(L, "sdpa")], by[(L, "sdpa_premask")]
    return (
        f"at L={L}: sdpa (mask inverted every call) {a['ms']:.3f} ms, +{a['peak_mib']:.0f} MiB; "
        f"sdpa_premask (inverted once) {b['ms']:.3f} ms, +{b['peak_mib']:.0f} MiB"
    )


def _backend_table(rows: list[dict]) -> str:
    forced = ("sdpa_flash", "sdpa_efficient", "sdpa_math", "sdpa_cudnn", "sdpa_flash_masked")
    names = ["flash", "efficient", "math", "cudnn", "flash+mask"]
    lines = [f"{'L':>6}" + "".join(f" {n:>11}" for n in names)]
    for L in sorted({r["L"] for r in rows}):
        line = f"{L:>6}"
        for v in forced:
            r = next((r for r in rows if r["L"] == L and r["variant"] == v), None)
            if r is None:
                cell = "-"
            elif outcome(r) is None:
                cell = f"{r['ms']:.3f}"
            else:
                cell = outcome(r)
            line += f" {cell:>11}"
        lines.append(line)
    return "\n".join(lines)


def plot_cpu_and_gpu(
    cpu_record: dict, data_dir=None, variants=("handwritten", "sdpa", "sdpa_causal")
):
    """Used in chapter 22. Time and memory against L: the recorded CPU sweep, and beside it the
    recorded GPU sweep (bfloat16) when there is one. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    from helpers.benchmark import plot_sweep

    gpu = load_gpu_record("attention", data_dir)
    rows = 1 if gpu is None else 2
    fig, axes = plt.subplots(rows, 2, figsize=(10, 3.6 * rows), squeeze=False)
    env, cfg = cpu_record["environment"], cpu_record["config"]
    plot_sweep(cpu_record["rows"], "", variants, axes=axes[0])
    axes[0][0].set_title(f"CPU ({env.get('cpu')}), {cfg.get('dtype')}: time", fontsize=9)
    axes[0][1].set_title("CPU: peak extra memory", fontsize=9)
    if gpu is not None:
        bf16 = [r for r in gpu.get("rows", []) if r.get("dtype") == "bfloat16"]
        plot_sweep(bf16, "", variants, axes=axes[1])
        axes[1][0].set_title(f"GPU ({gpu['environment'].get('gpu')}), bfloat16: time", fontsize=9)
        axes[1][1].set_title("GPU: peak extra memory", fontsize=9)
    fig.suptitle("")
    fig.tight_layout()
    return fig


def reference_ratios() -> dict:
    """Used in chapter 22. The reference chapter's handwritten / SDPA (is_causal) ratios on its
    RTX 4090 at L=1024: time (mean of 20 calls) and absolute peak memory."""
    hand, sdpa = REFERENCE_RTX4090["handwritten"], REFERENCE_RTX4090["sdpa_causal"]
    return {"time": hand["ms"] / sdpa["ms"], "memory": hand["mib"] / sdpa["mib"]}


def recorded_gpu_ratios(data_dir=None) -> dict | None:
    """Used in chapter 22. The same two ratios from the recorded GPU run's repeat of the
    reference chapter's protocol (this book's layer, autograd off), or None when no GPU run is
    recorded. The dict also carries the rows' shape (B, L, d_model, heads), so that the chapter
    can check it is the reference's. A ratio whose rows were not both measured (out of memory,
    say) is absent from the dict, as are both ratios when the two rows' shapes differ."""
    record = load_gpu_record("attention", data_dir)
    if record is None:
        return None
    by = {c["variant"]: c for c in reference_comparison(record, grad=False)}
    out = {"gpu": record["environment"].get("gpu", record["environment"].get("device"))}
    hand, sdpa = by.get("handwritten"), by.get("sdpa_causal")
    if hand is None or sdpa is None:
        return out
    rows = {
        r["variant"]: r
        for r in record.get("reference_protocol", [])
        if not r.get("grad", False) and r["variant"] in ("handwritten", "sdpa_causal")
    }
    shapes = {v: tuple(r.get(k) for k in ("B", "L", "d_model", "heads")) for v, r in rows.items()}
    if shapes["handwritten"] != shapes["sdpa_causal"]:
        return out
    out["L"] = hand["L"]
    out["shape"] = dict(zip(("B", "L", "d_model", "heads"), shapes["handwritten"]))
    if "ms" in hand and "ms" in sdpa:
        out["time"] = hand["ms"] / sdpa["ms"]
    if "mib" in hand and "mib" in sdpa:
        out["memory"] = hand["mib"] / sdpa["mib"]
    return out
