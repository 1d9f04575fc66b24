"""From compiled figures to launch numbers: roofline step time, MFU, images/s, days.

The roofline bound of one train step on one chip is
``max(FLOPs / peak bf16 FLOP/s, bytes accessed / HBM bandwidth)`` with XLA's
per-chip ``cost_analysis()`` figures and the chip's published peaks
(``softattn.topology.CHIPS``). It ignores inter-chip communication, latency
and imperfect overlap, so real steps are slower: the step time is a lower
bound, and images/s, MFU and days derived from it are best cases. MFU is the
analytic FLOPs of ``flops.py`` (not XLA's, which add elementwise work) over
chips x peak x step time. Under remat the analytic count includes the
recomputed forward, so the figure is then hardware FLOPs utilisation (HFU),
marked as such.
"""

from __future__ import annotations

import dataclasses

from softattn.aot.compile import Compiled

# XLA's count vs the analytic one: elementwise ops make XLA's slightly
# larger; outside this band the partitioned program does work the model does
# not need (or XLA misses some), which the report flags.
FLOPS_AGREEMENT = (0.95, 1.10)


@dataclasses.dataclass(frozen=True)
class Estimate:
  fits: bool
  hbm_gib: float | None            # per chip, train step
  capacity_gib: float
  step_seconds: float | None       # roofline lower bound
  bound: str | None                # "compute" or "memory"
  mfu: float | None                # at that step time
  images_per_second: float | None
  days: float | None               # the config's total_steps
  flops_ratio: float | None        # XLA global / analytic


def estimate(c: Compiled) -> Estimate:
  chip = c.topology.chip
  train = c.programs["train"]
  chips = c.topology.num_chips
  fits = all(p.fits for p in c.programs.values())
  hbm = train.hbm_bytes / 2**30 if train.hbm_bytes is not None else None
  cap = chip.hbm_bytes / 2**30
  if not train.fits or not train.flops:
    return Estimate(fits, hbm, cap, None, None, None, None, None, None)
  t_compute = train.flops / chip.peak_bf16_flops
  t_memory = (train.bytes_accessed or 0.0) / chip.hbm_bytes_per_s
  step = max(t_compute, t_memory)
  bound = "compute" if t_compute >= t_memory else "memory"
  model_flops = c.analytic_train_flops
  mfu = model_flops / (chips * chip.peak_bf16_flops * step)
  ratio = train.flops * chips / model_flops if model_flops else None
  return Estimate(fits, hbm, cap, step, bound, mfu,
                  c.config.batch_size / step,
                  c.config.total_steps * step / 86400.0, ratio)


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
      f"roofline step time >= {e.step_seconds * 1e3:.1f} ms ({e.bound}-bound; "
      f"peak {topo.chip.peak_bf16_flops / 1e12:.0f} TFLOP/s, "
      f"{topo.chip.hbm_bytes_per_s / 1e9:.0f} GB/s; no communication)",
      f"{'HFU (remat recompute counted)' if c.remat else 'MFU'} at that "
      f"time: {e.mfu:.1%};  images/s <= {e.images_per_second:,.0f};"
      f"  whole run >= {e.days:.3g} days ({e.days * 24:.3g} h)",
  ]
  return "\n".join(lines)
