"""The cost of growth itself: time and peak memory of one growth, next to a training step and a copy floor.

    python benchmarks/growth_cost.py                       # 12M, 39M, 91M (grown): results/growth_cost.json
    python benchmarks/growth_cost.py --sizes 12M --steps 2 # one size, fewer steps (smoke test)
    python benchmarks/growth_cost.py --growth depth      # 2x layers (copy-zero, stack): results/growth_cost_depth.json
    python benchmarks/growth_cost.py --device cuda --sizes 91M,350M,1.4B --batch 8 --seq 1024  # 1 GPU, bf16-mixed

For each size (a litgpt LLaMA-style GPT grown hidden 2x + MLP inner 2x, the largest growth of one stage), in a
fresh subprocess so that resident memory starts clean:

1. build the small model and AdamW, train ``--steps`` steps (batch ``--batch`` x ``--seq`` tokens);
2. grow it the way ``GrowthCallback`` does: the stage planned first, untimed (the callback plans every stage once,
   in ``setup``; the planning time is reported as ``plan_s``), then ``grow_model(plan=...)`` + the asymmetric AdamW
   state patch + the new-entry LR regions, timed;
3. train ``--steps`` steps of the grown model (median step time: the post-growth training step);
4. the floor, measured in the same process: copying the same bytes once, i.e. allocating and filling a copy of
   every grown parameter and every grown AdamW state tensor (``torch.empty_like(t).copy_(t)``; median of 3).

Memory is the process' resident set size (RSS), sampled every millisecond in a thread (CPU has no allocator
statistics): the growth peak is the highest RSS while growing, the post-growth training peak the highest RSS during
the grown model's steps. Because freed memory stays in the process (allocator caching), a second subprocess trains
the grown shape *from scratch* for the same steps: its peak is the training peak of that shape with nothing left
over from a growth, the stricter reference.

On ``--device cuda`` the model, optimizer and batch live on the GPU, the training steps run under bf16 autocast
(``--precision bf16-mixed``, the default there; weights and AdamW state stay float32, as Lightning's ``bf16-mixed``),
every timer synchronizes the device first, and memory is the CUDA allocator's peak of allocated bytes per phase
(``torch.cuda.max_memory_allocated``, reset at each phase) instead of the RSS. The results go to
``results/growth_cost[_<growth>]_cuda.json``.

Targets (issue #13): growth under the time of two training steps; growth peak at most 10% above the post-growth
training peak.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (name -> small config, grown widths); names are the grown model's parameter count
SIZES = {
    "12M": ({"n_layer": 4, "n_head": 4, "head_size": 32, "n_embd": 128, "intermediate_size": 512},
            {"n_embd": 256, "intermediate_size": 1024}),
    "39M": ({"n_layer": 6, "n_head": 8, "head_size": 32, "n_embd": 256, "intermediate_size": 1024},
            {"n_embd": 512, "intermediate_size": 2048}),
    "91M": ({"n_layer": 8, "n_head": 6, "head_size": 64, "n_embd": 384, "intermediate_size": 1536},
            {"n_embd": 768, "intermediate_size": 3072}),
    # GPU sizes (``--device cuda``): 24 layers as pythia-410m / TinyLlama's depth class
    "350M": ({"n_layer": 24, "n_head": 8, "head_size": 64, "n_embd": 512, "intermediate_size": 2048},
             {"n_embd": 1024, "intermediate_size": 4096}),
    "1.4B": ({"n_layer": 24, "n_head": 16, "head_size": 64, "n_embd": 1024, "intermediate_size": 4096},
             {"n_embd": 2048, "intermediate_size": 8192}),
}
CPU_SIZES = ("12M", "39M", "91M")
VOCAB = 16384
#: what one growth does (``--growth``): the size's widths, 2x its layers, or both in one stage
GROWTHS = ("width", "depth", "depth+width")


def growth_keys(size: str, growth: str) -> dict:
    """The ``GrowthStage`` sizes of ``--growth`` at ``size``."""
    small, widths = SIZES[size]
    depth = {"n_layer": 2 * small["n_layer"]}
    return {"width": widths, "depth": depth, "depth+width": {**widths, **depth}}[growth]


def make_config(small: dict, seq: int):
    from litgpt import Config

    return Config(name="bench", vocab_size=VOCAB, padded_vocab_size=VOCAB, block_size=max(seq, 128),
                  n_query_groups=small["n_head"], mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False,
                  parallel_residual=False, rotary_percentage=1.0, **small)


class RSSSampler:
    """Highest resident set size per phase, sampled every ``interval`` seconds in a daemon thread."""

    def __init__(self, interval: float = 0.001) -> None:
        import psutil

        self._proc = psutil.Process()
        self.interval = interval
        self.phase = "start"
        self.peaks: dict[str, int] = {}
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> int:
        return self._proc.memory_info().rss

    def _run(self) -> None:
        while not self._stop:
            r = self.rss()
            if r > self.peaks.get(self.phase, 0):
                self.peaks[self.phase] = r
            time.sleep(self.interval)

    def enter(self, phase: str) -> None:
        r = self.rss()
        self.phase = phase
        self.peaks[phase] = max(self.peaks.get(phase, 0), r)

    def stop(self) -> None:
        self._stop = True
        self._thread.join()


class CudaPeaks:
    """The same interface as :class:`RSSSampler` on a GPU: the CUDA allocator's peak of allocated bytes per phase
    (reset when a phase starts); ``rss()`` is the bytes allocated now."""

    def __init__(self) -> None:
        import torch

        self._cuda = torch.cuda
        self.phase = "start"
        self.peaks: dict[str, int] = {}
        self._cuda.reset_peak_memory_stats()

    def rss(self) -> int:
        return self._cuda.memory_allocated()

    def _close(self) -> None:
        self._cuda.synchronize()
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), self._cuda.max_memory_allocated())

    def enter(self, phase: str) -> None:
        self._close()
        self.phase = phase
        self._cuda.reset_peak_memory_stats()

    def stop(self) -> None:
        self._close()


def sync(device) -> None:
    """Wait for the device's queued work, so that a timer reads what was done (a no-op on CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def train_step(model, optimizer, ids, autocast: bool = False) -> float:
    import torch
    import torch.nn.functional as F

    sync(ids.device)
    t0 = time.perf_counter()
    with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # as Lightning: no gradients exist when the growth runs
    sync(ids.device)
    return time.perf_counter() - t0


def state_tensors(model, optimizer):
    import torch

    out = [p.data for p in model.parameters()]
    for st in optimizer.state.values():
        out += [v for v in st.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    return out


def worker(args) -> dict:
    """One size in this process (``--worker grow`` or ``--worker scratch``)."""
    import torch
    from litgpt import GPT

    from lightning_sparkling import GrowthStage, grow_model
    from lightning_sparkling.growth.compute import count_params
    from lightning_sparkling.growth.optim_state import RewarmupRescale, NewEntryRegion, plan_optimizer_patch
    from lightning_sparkling.growth.plan import grown_config, plan_growth

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    autocast = args.precision == "bf16-mixed"
    small, _ = SIZES[args.size]
    widths = growth_keys(args.size, args.growth)
    config = make_config(small, args.seq)
    grown = grown_config(config, widths)
    sampler = CudaPeaks() if device.type == "cuda" else RSSSampler()
    ids = torch.randint(0, VOCAB, (args.batch, args.seq + 1), device=device)
    out = {"size": args.size, "params_before": count_params(config)[1], "params_after": count_params(grown)[1],
           "threads": args.threads, "batch": args.batch, "seq": args.seq, "steps": args.steps,
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "precision": args.precision}
    mib = 2 ** 20

    def build(cfg):
        with device:
            model = GPT(cfg)
        model.apply(model._init_weights)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    if args.worker == "scratch":
        sampler.enter("build")
        model, opt = build(grown)
        sampler.enter("train")
        times = [train_step(model, opt, ids, autocast) for _ in range(args.steps)]
        sampler.stop()
        out.update({"scratch_step_s": statistics.median(times[1:] or times),
                    "scratch_train_peak_mib": sampler.peaks["train"] / mib})
        return out

    sampler.enter("build")
    model, opt = build(config)
    sampler.enter("train_small")
    small_times = [train_step(model, opt, ids, autocast) for _ in range(args.steps)]
    old_bytes = sum(t.numel() * t.element_size() for t in state_tensors(model, opt))

    time.sleep(0.05)
    sampler.enter("before_growth")
    rss_before = sampler.rss()
    stage = GrowthStage(1, **widths)
    t0 = time.perf_counter()
    plan = plan_growth(model.config, stage)  # in GrowthCallback.setup, before the run: not part of the growth
    t_plan = time.perf_counter() - t0
    sampler.enter("growth")
    sync(device)
    t0 = time.perf_counter()
    result = grow_model(model, stage, plan=plan)
    sync(device)
    t_model = time.perf_counter() - t0
    patch = plan_optimizer_patch(opt, result, "asymmetric")
    patch.apply()
    sync(device)
    t_optim = time.perf_counter() - t0
    grown_params = {**result.new_params, **{n: new for n, (_, new) in result.added.items()}}
    regions = {0: [NewEntryRegion(grown_params[n], [(grown_params[n].data, piece) for piece in pieces],
                                  lambda: 1.3e-3) for n, pieces in result.new_entries.items()]}
    hook = RewarmupRescale(opt, regions)
    sync(device)
    t_growth = time.perf_counter() - t0
    del result, patch, plan
    time.sleep(0.05)
    sampler.enter("after_growth")
    rss_after = sampler.rss()

    sampler.enter("train_grown")
    grown_times = [train_step(model, opt, ids, autocast) for _ in range(args.steps)]
    hook.remove()

    sampler.enter("floor")
    tensors = state_tensors(model, opt)
    new_bytes = sum(t.numel() * t.element_size() for t in tensors)
    floors = []
    for _ in range(3):
        sync(device)
        t0 = time.perf_counter()
        copies = [torch.empty_like(t).copy_(t) for t in tensors]
        sync(device)
        floors.append(time.perf_counter() - t0)
        del copies
    sampler.stop()
    step = statistics.median(grown_times[1:] or grown_times)  # the first grown step warms new shapes
    pk = sampler.peaks
    out.update({
        "small_step_s": statistics.median(small_times[1:] or small_times),
        "plan_s": t_plan, "grow_model_s": t_model, "growth_with_optimizer_s": t_optim, "growth_s": t_growth,
        "grown_step_s": step, "grown_first_step_s": grown_times[0],
        "growth_over_step": t_growth / step,
        "floor_copy_s": statistics.median(floors), "growth_over_floor": t_growth / statistics.median(floors),
        "bytes_before_mib": old_bytes / mib, "bytes_after_mib": new_bytes / mib,
        "rss_before_growth_mib": rss_before / mib, "rss_after_growth_mib": rss_after / mib,
        "small_train_peak_mib": pk["train_small"] / mib, "growth_peak_mib": pk["growth"] / mib,
        "grown_train_peak_mib": pk["train_grown"] / mib,
        "growth_peak_over_train_peak": pk["growth"] / pk["train_grown"],
    })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(CPU_SIZES),
                        help=f"comma list of {', '.join(SIZES)} (default {','.join(CPU_SIZES)})")
    parser.add_argument("--steps", type=int, default=4, help="training steps before and after growth (default 4)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per step (default 4)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence (default 256)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--growth", choices=GROWTHS, default="width",
                        help="what grows: the widths 2x (default), the layers 2x, or both in one stage")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where to train and grow (default cpu)")
    parser.add_argument("--precision", choices=["32-true", "bf16-mixed"], default=None,
                        help="training steps' precision (default: 32-true on cpu, bf16-mixed on cuda)")
    parser.add_argument("--out", default=None,
                        help="JSON path (default results/growth_cost[_<growth>][_cuda].json)")
    parser.add_argument("--worker", choices=["grow", "scratch"], help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.precision is None:
        args.precision = "bf16-mixed" if args.device == "cuda" else "32-true"
    unknown = [s for s in args.sizes.split(",") if s not in SIZES]
    if unknown:
        parser.error(f"--sizes: unknown {', '.join(unknown)} (known: {', '.join(SIZES)})")
    if args.out is None:
        suffix = "" if args.growth == "width" else "_" + args.growth.replace("+", "_")
        suffix += "_cuda" if args.device == "cuda" else ""
        args.out = str(HERE / "results" / f"growth_cost{suffix}.json")
    if args.worker:
        print("RESULT " + json.dumps(worker(args)))
        return 0

    rows = []
    for size in args.sizes.split(","):
        row = {}
        for mode in ("grow", "scratch"):
            cmd = [sys.executable, __file__, "--worker", mode, "--size", size, "--growth", args.growth,
                   "--steps", str(args.steps),
                   "--batch", str(args.batch), "--seq", str(args.seq), "--threads", str(args.threads),
                   "--device", args.device, "--precision", args.precision]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                  env={**os.environ, "PYTHONWARNINGS": "ignore"})
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(f"worker {mode} {size} failed:\n{proc.stdout}\n{proc.stderr}")
            row.update(json.loads(line[7:]))
        row["growth_peak_over_scratch_peak"] = row["growth_peak_mib"] / row["scratch_train_peak_mib"]
        row["ok_time"] = row["growth_s"] < 2 * row["grown_step_s"]
        row["ok_memory"] = row["growth_peak_mib"] <= 1.10 * row["grown_train_peak_mib"]
        rows.append(row)
        print(f"{size}: growth / floor = {row['growth_over_floor']:.2f}x (growth {row['growth_s']:.3f} s, floor "
              f"{row['floor_copy_s']:.3f} s; planned before, in setup: {row['plan_s']:.3f} s), grown step "
              f"{row['grown_step_s']:.3f} s; peaks: growth {row['growth_peak_mib']:.0f} MiB, grown training "
              f"{row['grown_train_peak_mib']:.0f} MiB, from-scratch training {row['scratch_train_peak_mib']:.0f} MiB",
              flush=True)

    import torch

    memory = "CUDA allocated" if args.device == "cuda" else "RSS"
    head = ("| grown params | growth (s) | of which grow_model / + state patch | floor copy (s) | growth / floor | "
            f"grown step (s) | growth / step | {memory} before growth (MiB) | growth peak | grown training peak | "
            "from-scratch training peak | growth peak / training peak |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['params_before'] / 1e6:.1f}M -> {r['params_after'] / 1e6:.1f}M | {r['growth_s']:.3f} | "
            f"{r['grow_model_s']:.3f} / {r['growth_with_optimizer_s']:.3f} | {r['floor_copy_s']:.3f} | "
            f"{r['growth_over_floor']:.2f}x | {r['grown_step_s']:.3f} | {r['growth_over_step']:.2f} | "
            f"{r['rss_before_growth_mib']:.0f} | {r['growth_peak_mib']:.0f} | {r['grown_train_peak_mib']:.0f} | "
            f"{r['scratch_train_peak_mib']:.0f} | {r['growth_peak_over_train_peak']:.2f} "
            f"(vs scratch {r['growth_peak_over_scratch_peak']:.2f}) |")
    table = "\n".join(lines)
    print(table)
    print("growth / floor (goal: at most 3x at every size): "
          + ", ".join(f"{r['size']} {r['growth_over_floor']:.2f}x" for r in rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"torch": torch.__version__, "device": rows[0]["device"] if rows else args.device,
                               "precision": args.precision, "growth": args.growth, "threads": args.threads,
                               "batch": args.batch, "seq": args.seq, "steps": args.steps, "rows": rows, "table": table},
                              indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
