"""From compiled figures to launch numbers: a step-time bound, MFU, images/s, days.

One train step on one chip cannot be faster than any of

* compute: XLA's FLOPs per chip / the chip's peak bf16 FLOP/s;
* HBM:     the program's HBM traffic per chip / HBM bandwidth, taken from a
  compile with VMEM staging off (``compile.hbm_traffic`` says why XLA's raw
  "bytes accessed" counts staged data twice; the raw figure is reported
  beside it, labelled);
* ICI:     the bytes the chip sends in the program's all-gathers,
  reduce-scatters and all-reduces / its ICI bandwidth
  (``softattn.aot.collectives``);

so ``step >= max(compute, HBM, ICI)`` and ``bound`` names the largest. Each
term assumes perfect overlap with the others and peak rates, so real steps
are slower: the step time is a lower bound, and images/s, MFU and days
derived from it are best cases. MFU is the analytic FLOPs of ``flops.py``
(not XLA's, which add elementwise work) over chips x peak x step time. Under
remat the analytic count includes the recomputed forward, so the figure is
then hardware FLOPs utilisation (HFU), marked as such.
"""

from __future__ import annotations

import dataclasses

from softattn.aot.compile import Compiled

# XLA's count vs the analytic one: elementwise ops make XLA's slightly
# larger; outside this band the partitioned program does work the model does
# not need (or XLA misses some), which the report flags.
FLOPS_AGREEMENT = (0.95, 1.10)


@dataclasses.dataclass(frozen=True)
class RooflineEstimate:
  fits: bool
  hbm_gib: float | None            # per chip, train step
  capacity_gib: float
  step_seconds: float | None       # lower bound: max of the three terms
  bound: str | None                # "compute", "HBM" or "ICI"
  mfu: float | None                # at that step time
  images_per_second: float | None
  days: float | None               # the config's total_steps
  flops_ratio: float | None        # XLA global / analytic
  compute_seconds: float | None = None
  hbm_seconds: float | None = None
  ici_seconds: float | None = None
  hbm_bytes: float | None = None   # per chip, staging off (the bound's)
  xla_bytes: float | None = None   # per chip, XLA's raw "bytes accessed"
  ici_bytes: float | None = None   # per chip, sent over ICI


def terms(flops: float, hbm_bytes: float, ici_bytes: float, chip
          ) -> dict[str, float]:
  """Seconds each resource needs at its peak: ``{compute, HBM, ICI}``."""
  return {"compute": flops / chip.peak_bf16_flops,
          "HBM": hbm_bytes / chip.hbm_bytes_per_s,
          "ICI": ici_bytes / chip.ici_bytes_per_s if ici_bytes else 0.0}


def estimate(c: Compiled) -> RooflineEstimate:
  chip = c.topology.chip
  train = c.programs["train"]
  chips = c.topology.num_chips
  fits = all(p.fits for p in c.programs.values())
  hbm = train.hbm_bytes / 2**30 if train.hbm_bytes is not None else None
  cap = chip.hbm_bytes / 2**30
  if not train.fits or not train.flops:
    return RooflineEstimate(fits, hbm, cap, None, None, None, None, None, None)
  hbm_bytes = (train.hbm_traffic if train.hbm_traffic is not None
               else train.bytes_accessed) or 0.0
  ici_bytes = train.traffic.ici_bytes if train.traffic is not None else 0.0
  t = terms(train.flops, hbm_bytes, ici_bytes, chip)
  bound = max(t, key=t.get)
  step = t[bound]
  model_flops = c.analytic_train_flops
  mfu = model_flops / (chips * chip.peak_bf16_flops * step)
  ratio = train.flops * chips / model_flops if model_flops else None
  return RooflineEstimate(fits, hbm, cap, step, bound, mfu,
                          c.config.batch_size / step,
                          c.config.total_steps * step / 86400.0, ratio,
                          t["compute"], t["HBM"], t["ICI"], hbm_bytes,
                          train.bytes_accessed, ici_bytes)


def describe(c: Compiled) -> str:
  """The report ``python -m softattn.aot`` prints."""
  e = estimate(c)
  cfg, topo = c.config, c.topology
  lines = [
      f"{cfg.model_name} {dict(cfg.model)}",
      f"{topo.name}: {topo.num_chips} chips of {topo.chip.name} "
      f"({topo.topology_name}, {topo.num_slices} slice(s)); mesh "
      f"{c.mesh_shape}; batch {cfg.batch_size} "
      f"({cfg.batch_size / c.mesh_shape['data']:g} per data shard); "
      f"{c.num_params:,} parameters; {cfg.total_steps:,} steps",
      "",
      f"{'program':<12} {'fits':<5} {'HBM/chip':>10} {'FLOPs/chip':>11} "
      f"{'bytes/chip':>11} {'compile':>8}  HBM from",
  ]
  for p in c.programs.values():
    gib = f"{p.hbm_bytes / 2**30:.2f} GiB" if p.hbm_bytes is not None else "?"
    fl = f"{p.flops:.3e}" if p.flops else "-"
    by = f"{p.bytes_accessed:.3e}" if p.bytes_accessed else "-"
    lines.append(f"{p.name:<12} {'yes' if p.fits else 'NO':<5} {gib:>10} "
                 f"{fl:>11} {by:>11} {p.compile_seconds:>7.0f}s  {p.hbm_source}")
    if p.oom is not None:
      lim = (f" (limit {p.oom.limit_bytes / 2**30:.2f} GiB)"
             if p.oom.limit_bytes else "")
      lines.append(f"  does not fit{lim}: {p.oom.message}")
  lines.append(f"capacity: {e.capacity_gib:.2f} GiB HBM per {topo.chip.name} "
               "chip (published)")
  lines.append(f"verdict: {'fits' if e.fits else 'does not fit'}")
  if e.step_seconds is None:
    return "\n".join(lines)
  lo, hi = FLOPS_AGREEMENT
  agree = ("agrees" if lo <= e.flops_ratio <= hi else
           "DISAGREES: work repeated across chips or missed by XLA")
  lines += [
      f"train FLOPs: XLA {c.programs['train'].flops * topo.num_chips:.4e} "
      f"(all chips) vs analytic {c.analytic_train_flops:.4e} "
      f"(2 x MACs of the step's matmuls/convs): ratio {e.flops_ratio:.3f}, "
      f"{agree}",
      f"HBM traffic: {e.hbm_bytes / 1e9:.2f} GB/chip "
      f"({c.programs['train'].hbm_traffic_source}); XLA's raw bytes "
      f"accessed: {e.xla_bytes / 1e9:.2f} GB/chip (staging copies counted)",
      f"ICI: {e.ici_bytes / 1e9:.3f} GB/chip sent "
      f"({c.programs['train'].traffic.describe() if c.programs['train'].traffic else 'not read'})",
      f"step time >= {e.step_seconds * 1e3:.1f} ms, {e.bound}-bound: compute "
      f"{e.compute_seconds * 1e3:.1f} ms (peak "
      f"{topo.chip.peak_bf16_flops / 1e12:.0f} TFLOP/s), HBM "
      f"{e.hbm_seconds * 1e3:.1f} ms ({topo.chip.hbm_bytes_per_s / 1e9:.0f} "
      f"GB/s), ICI {e.ici_seconds * 1e3:.1f} ms "
      f"({topo.chip.ici_bytes_per_s / 1e9:.0f} GB/s)",
      f"{'HFU (remat recompute counted)' if c.remat else 'MFU'} at that "
      f"time: {e.mfu:.1%};  images/s <= {e.images_per_second:,.0f};"
      f"  whole run >= {e.days:.3g} days ({e.days * 24:.3g} h)",
  ]
  return "\n".join(lines)
