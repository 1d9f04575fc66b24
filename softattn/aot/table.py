"""The launch table: every full-scale config compiled for the slice it is meant for.

``python -m softattn.aot table --out=docs/scale.md`` compiles each row's
train and eval programs (the diagnostics program, a gradient without the
update, runs only at log steps; ``python -m softattn.aot`` compiles it for
one config) and writes per-chip HBM, fits, the roofline step time, MFU and
days. Each row is kept as it finishes (``<out>.partial.jsonl``; a rerun
skips rows already there), so a partial run is not lost.

Intended slices: the i21k ViTs at batch 4096 on a v4-32 and a v5e-256 (the
slices big_vision and the ReLU-attention paper name); ResNet-50 at batch 8192
on a v5e-256 (32 per chip); the CIFAR/Fashion-MNIST studies on one v5e chip
per run (their batches are 32-4096 small images: a sweep runs its runs side
by side rather than splitting one over chips). A study row compiles the
sweep's largest model (most parameters) and stands for all its runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

from softattn import paths
from softattn.aot import hostfeed
from softattn.models import abstract
from softattn.sweep import declaration

PROGRAMS = ("train", "eval")


@dataclasses.dataclass(frozen=True)
class Row:
  label: str
  spec: str                        # "configs/x.py:arg" or a sweep "...sweep.py:arg"
  topology: str
  overrides: tuple[tuple[str, Any], ...] = ()  # (dotted field, value)
  note: str = ""


_I21K = "configs/i21k_vit.py:variant={}"
ROWS = [
    *[Row(f"i21k ViT-{v}", _I21K.format(v), t)
      for v in ("S/16", "B/16", "L/16") for t in ("v4-32", "v5e-256")],
    *[Row("i21k ViT-B/16, bf16", _I21K.format("B/16") + ",dtype=bfloat16", t,
          note="`dtype=bfloat16`: activations and matmuls in bf16, float32 "
          "parameters, optimizer and loss (configs/i21k_vit.py).")
      for t in ("v4-32", "v5e-256")],
    Row("i21k ViT-B/16, 4 registers", _I21K.format("B/16") + ",registers=4",
        "v4-32", note="`registers=4`: four register tokens (Darcet et al. "
        "2023), appended after the patches without a position embedding "
        "and dropped before the head: every block sees L = 196 + 4 tokens."),
    Row("i21k ViT-L/16, remat", _I21K.format("L/16") + ",remat=True", "v4-32",
        note="`remat=True`: nn.remat per block (unrolled) "
        "(nothing_saveable), for L/16 at 256 images per chip."),
    Row("i21k ViT-S/32 (ReLU-attention study)", _I21K.format("S/32"), "v4-32"),
    Row("ImageNet ResNet-50 (NormSoftmax loss study)",
        "configs/imagenet_resnet50.py", "v5e-256"),
    Row("CIFAR-10 ViT (NormSoftmax attention study)", "configs/cifar10_vit.py",
        "v5e-1"),
    Row("non-local PreResNet-56 CIFAR-10", "experiments/nonlocal/sweep.py:"
        "scale=full", "v5e-1"),
    Row("element-wise models, Fashion-MNIST", "experiments/elementwise/"
        "sweep.py:part=models,scale=full", "v5e-1"),
    Row("element-wise models, CIFAR-10", "experiments/elementwise/sweep.py:"
        "part=models,scale=full,dataset=cifar10", "v5e-1"),
    Row("element-wise VGG control", "experiments/elementwise/sweep.py:"
        "part=control,scale=full", "v5e-1"),
    Row("periodic LeViT demo CIFAR-100", "experiments/periodic/sweep.py:"
        "scale=full", "v5e-1"),
]


def row_config(row: Row):
  """The config a row compiles (a sweep's largest model), overrides applied."""
  path, arg = declaration.split_spec(row.spec)
  if path.endswith("sweep.py"):
    runs = declaration.load(row.spec).runs
    config = max(runs, key=lambda r: abstract.param_count(
        abstract.build_abstract(r.config)[1])).config
  else:
    config = declaration.config_from_file(path, arg)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    for field, value in row.overrides:
      node = config
      *parents, leaf = field.split(".")
      for p in parents:
        node = node[p]
      node[leaf] = value
  return config


def row_pp_train(row: Row) -> str:
  """The row's training preprocessing (a sweep's runs all share theirs)."""
  path, arg = declaration.split_spec(row.spec)
  if path.endswith("sweep.py"):
    return declaration.load(row.spec).runs[0].config.data.pp_train
  return declaration.config_from_file(path, arg).data.pp_train


def compile_row(row: Row) -> dict:
  """One row's result as a JSON-able dict (compile figures + estimate)."""
  from softattn import aot, configlib  # pylint: disable=g-import-not-at-top
  try:
    compiled = aot.compile_config(row_config(row), row.topology,
                                  programs=PROGRAMS)
  except configlib.ConfigError as e:  # e.g. a batch the slice does not divide
    return dict(label=row.label, spec=row.spec, topology=row.topology,
                overrides=[list(o) for o in row.overrides], note=row.note,
                error=str(e), report=f"config error: {e}")
  e = aot.estimate(compiled)
  cfg = compiled.config
  return dict(
      label=row.label, spec=row.spec, topology=row.topology,
      overrides=[list(o) for o in row.overrides], note=row.note,
      batch=cfg.batch_size, total_steps=cfg.total_steps,
      compute_dtype=cfg.compute_dtype, params=compiled.num_params,
      remat=compiled.remat,
      mesh=compiled.mesh_shape, estimate=dataclasses.asdict(e),
      programs={n: dict(fits=p.fits, hbm_gib=None if p.hbm_bytes is None
                        else p.hbm_bytes / 2**30, hbm_source=p.hbm_source,
                        flops=p.flops, compile_seconds=p.compile_seconds,
                        oom=p.oom.message if p.oom else None)
                for n, p in compiled.programs.items()},
      report=aot.describe(compiled))


def _cell(x, fmt):
  return "–" if x is None else format(x, fmt)


def render(results: list[dict], pending: list[Row] = (),
           per_core: float | None = None) -> str:
  """The Markdown page: one line per row, then each row's full report.

  ``per_core``: the training input's images/s per host core
  (``hostfeed.per_core_rate()``) for the host-feed column; None leaves it
  empty.
  """
  head = ("| config | slice | batch | params | GiB/chip (train / eval) | "
          "fits | step ≥ | MFU ≤ | images/s ≤ | "
          f"{hostfeed.HEADER} | days ≥ | FLOPs XLA/analytic "
          "| compile (train / eval) |\n|" + "---|" * 13)
  pp_of = {row.label: row_pp_train(row) for row in ROWS}
  lines = []
  for r in results:
    if "error" in r:
      lines.append(f"| {r['label']} | {r['topology']} | config error: "
                   f"{r['error']} |" + " |" * 11)
      continue
    e, p = r["estimate"], r["programs"]
    gib = " / ".join(_cell(p[n]["hbm_gib"], ".2f") for n in PROGRAMS if n in p)
    secs = " / ".join(f"{p[n]['compile_seconds']:.0f} s" for n in PROGRAMS
                      if n in p)
    step = None if e["step_seconds"] is None else e["step_seconds"] * 1e3
    bound = f" ({e['bound']})" if e.get("bound") else ""
    feed = ("–" if per_core is None else hostfeed.row_cell(
        e["images_per_second"], r["topology"], pp_of.get(r["label"], ""),
        per_core))
    lines.append(
        f"| {r['label']} | {r['topology']} | {r['batch']} | "
        f"{r['params'] / 1e6:.1f} M | {gib} | "
        f"{'yes' if e['fits'] else '**no**'} | {_cell(step, '.1f')} ms{bound} | "
        f"{_cell(e['mfu'], '.0%')}{' (HFU)' if r.get('remat') else ''} | "
        f"{_cell(e['images_per_second'], ',.0f')} | {feed} | "
        f"{_cell(e['days'], '.3g')} | {_cell(e['flops_ratio'], '.3f')} | "
        f"{secs} |")
  lines += [f"| {r.label} | {r.topology} | not compiled yet: rerun the "
            "table command |" + " |" * 11 for r in pending]
  details = "\n\n".join(
      f"### {r['label']} on {r['topology']}\n\n`{r['spec']}`"
      + (f" with {r['overrides']}" if r["overrides"] else "")
      + (f"\n\n{r['note']}" if r["note"] else "")
      + f"\n\n```\n{r['report']}\n```" for r in results)
  return head + "\n" + "\n".join(lines) + "\n\n## Reports\n\n" + details + "\n"


def main(out: str, only: str | None = None) -> None:
  """Compiles the rows (``only``: those whose label or slice contains it).

  Results go to ``<out>.partial.jsonl`` as each row finishes; a rerun reuses
  them, and the file is removed once every row is in ``out``.
  """
  cache = out + ".partial.jsonl"
  done = _read(cache)
  for row in ROWS:
    if (row.label, row.topology) in done or (
        only and only not in row.label and only != row.topology):
      continue
    print(f"compiling {row.label} for {row.topology} ...", flush=True)
    result = compile_row(row)
    print(result["report"] + "\n", flush=True)
    log = paths.AppendLog(cache)  # rolled parts when ``out`` is on gs://
    log.write(json.dumps(result, default=str) + "\n")
    log.close()
  done = _read(cache)  # with rows another process may have added
  results = [done[(r.label, r.topology)] for r in ROWS
             if (r.label, r.topology) in done]
  pending = [r for r in ROWS if (r.label, r.topology) not in done]
  paths.write_atomic(out, _intro() + render(results, pending,
                                            per_core=hostfeed.per_core_rate()))
  if len(results) == len(ROWS):
    paths.remove_log(cache)
  print(f"wrote {out} ({len(results)} of {len(ROWS)} rows)")


def add_host_feed(path: str, benchmark: str = hostfeed.BENCHMARK) -> None:
  """Adds (or refreshes) the host-feed column of an existing table page from
  its images/s column and the committed input benchmark: no compiling."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  text = hostfeed.add_column(text, {r.label: row_pp_train(r) for r in ROWS},
                             hostfeed.per_core_rate(benchmark))
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def _read(cache: str) -> dict:
  return {(r["label"], r["topology"]): r
          for r in paths.read_json_lines(cache)}


def _intro() -> str:
  return f"""# Launch table: full-scale configs compiled for their TPU slices

Regenerate (CPU host, libtpu from `pip install -e '.[tpu-aot]'`; no TPU, no
data; compile times are in the last column, measured on a 2-core host that
was shared with other jobs, so an idle host is faster):

    python -m softattn.aot table --out=docs/scale.md

One config at a time, with the diagnostics program too and any override:

    python -m softattn.aot --config=configs/i21k_vit.py:variant=B/16 --topology=v5e-256

Each row is the config's train and eval programs compiled by the TPU compiler
for the slice (`softattn.aot`, `softattn.topology`). **GiB/chip** is XLA's
buffer assignment in HBM per chip (the compiler's own figure when it ran out
of memory); **fits** is the compiler's verdict against the chip's HBM.
**step ≥** is a lower bound per step, max(compute, HBM, ICI), and names the
term that binds (`softattn/aot/roofline.py`): XLA's FLOPs per chip / peak
bf16 FLOP/s; the program's HBM bytes per chip, from a compile with VMEM
staging off (XLA's raw "bytes accessed" counts staged data twice; each
report gives both) / HBM bandwidth; and the bytes each chip sends in its
all-gathers, reduce-scatters and all-reduces, read from the optimized HLO /
the chip's ICI bandwidth. Each term assumes peak rates and perfect overlap,
so **MFU**, **images/s** and **days** (the config's whole run) are best
cases. **host feed** is what each TPU host's CPUs must supply at that rate:
images/s ÷ hosts in the slice, and the cores that takes at the measured rate
of the training input per core (`benchmarks/input_pipeline.py`, committed
result), against the host's published vCPUs (`softattn/aot/hostfeed.py`).
**FLOPs XLA/analytic** compares XLA's count over all chips
with 2 x the multiply-adds of every matmul and convolution in the train step's
jaxpr; near 1 means no chip repeats another's work. It is meaningful for the
matmul-bound ViTs and ResNets, not for the element-wise models, whose work is
mostly elementwise (XLA counts it, the analytic count does not). Chip peaks
and sources:
`softattn/topology.py`. Generated {datetime.date.today().isoformat()}.

Changes the table led to: `configs/imagenet_resnet50.py` evaluated in
batches of 1000, which no slice of 16 or more chips divides (its launch on a
v5e-256 failed in `resolve_config`): now 1024. `configs/i21k_vit.py` gained
`remat=True` (per-block rematerialisation, unrolled so that XLA's cost
analysis counts every layer): when this table was first made
(2026-11-23), **ViT-L/16 on a v4-32 at batch 4096 did not fit without it**
(48.4 GiB per chip against 32 GiB). Since the fused kernels stopped saving
padded float32 copies for the backward it fits as is (28.49 GiB, the row
above), and remat leaves room (9.15 GiB). Every other config fits its
intended slice unchanged, with the FSDP sharding fix
(`sharding.gather_for_compute`): before it, ViT-B/16 on a v5e-256 needed
17.7 GiB per chip (out of memory); now 1.60 GiB.

"""
