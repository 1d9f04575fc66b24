"""Compile a config's train, eval and diagnostics programs for a TPU topology.

Nothing runs: the state, batch and mesh are abstract (``ShapeDtypeStruct``s
with ``NamedSharding``s over :func:`softattn.topology.abstract_devices`), the
programs are the ones ``train.make_steps`` jits for a real run, and each is
lowered and compiled by the TPU compiler in libtpu on this host.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp

from softattn import configlib, optim, sharding, topology, train, xla_cost
from softattn.aot import collectives, datasets, flops as flops_lib, memory


@dataclasses.dataclass
class Program:
  """One compiled program's per-chip figures (None where not available)."""
  name: str
  fits: bool
  hbm_bytes: float | None          # per chip; compiler's figure when OOM
  hbm_source: str                  # "buffer assignment", "compiler (OOM)", ...
  flops: float | None = None       # per chip, XLA cost_analysis
  bytes_accessed: float | None = None  # per chip, XLA cost_analysis
  compile_seconds: float = 0.0
  oom: memory.OutOfMemory | None = None
  # With bound=True (the train program): what the roofline's bound uses.
  hbm_traffic: float | None = None      # per chip, bytes (see hbm_source)
  hbm_traffic_source: str = ""
  traffic: collectives.Traffic | None = None  # ICI, from the optimized HLO
  hlo_text: str = dataclasses.field(default="", repr=False)  # optimized HLO
  # The optimized HLO ``hbm_traffic`` was read from (staging off where a
  # second compile turned it off): what benchmarks/hlo_diff.py compares.
  hbm_hlo_text: str = dataclasses.field(default="", repr=False)


@dataclasses.dataclass
class Compiled:
  """A config compiled for one topology."""
  topology: topology.Topology
  config: Any                      # the resolved ConfigDict
  dataset_info: dict
  mesh_shape: dict
  num_params: int
  analytic_train_flops: float      # global, one train step (flops.py)
  remat: bool                      # the step recomputes (analytic counts it)
  programs: dict[str, Program]


def _cost(compiled) -> tuple[float | None, float | None]:
  cost = xla_cost.cost_analysis(compiled)
  return cost.get("flops"), cost.get("bytes accessed")


def hbm_traffic(lowered, hlo_text: str, chip: topology.Chip | None,
                bytes_accessed: float | None) -> tuple[float | None, str, str]:
  """Per-chip HBM bytes of a program without the VMEM staging copies, where
  they come from, and the optimized HLO they were read from.

  XLA's "bytes accessed" counts every op's operands and outputs, including
  the asynchronous HBM<->VMEM copies that memory-space assignment inserts,
  and then again the fusions that read the same data from VMEM: staged data
  is counted about twice. Recompiling with the chip's staging switch off
  gives the same FLOPs and fusions with each operand read from HBM once.
  """
  if "S(1)" not in hlo_text:   # no VMEM-resident buffers at all
    return (bytes_accessed, "XLA bytes accessed (no VMEM staging in the "
            "program)", hlo_text)
  if chip is None or not chip.vmem_staging_flag:
    return bytes_accessed, ("XLA bytes accessed, VMEM staging counted (no "
                            "switch known for this chip: an overestimate)"), \
        hlo_text
  off = lowered.compile(compiler_options={chip.vmem_staging_flag: False})
  return (_cost(off)[1], f"XLA bytes accessed, {chip.vmem_staging_flag}=false",
          off.as_text())


def compile_program(name: str, jitted, *args, bound: bool = False,
                    chip: topology.Chip | None = None,
                    num_devices: int = 1) -> Program:
  """Lowers and compiles ``jitted(*args)``; an out-of-memory compile is a result.

  ``bound=True`` also reads the program's ICI traffic from its HLO and its
  HBM traffic without VMEM staging (a second compile on v5e/v6e), the inputs
  of the roofline bound.
  """
  dump = tempfile.mkdtemp(prefix="softattn_aot_")
  t0 = time.perf_counter()
  try:
    lowered = jitted.lower(*args)
    try:
      # The dump holds the buffer assignment (see memory.py for why it is
      # read rather than memory_analysis()).
      compiled = lowered.compile(compiler_options={"xla_dump_to": dump})
    except Exception as e:  # pylint: disable=broad-except
      oom = memory.parse_oom(e)
      if oom is None:
        raise
      return Program(name, False, oom.used_bytes, "compiler (out of memory)",
                     compile_seconds=time.perf_counter() - t0, oom=oom)
    seconds = time.perf_counter() - t0
    hbm, source = memory.buffer_assignment_bytes(dump), "buffer assignment"
    if hbm is None:
      hbm, source = memory.memory_analysis_bytes(compiled), "memory_analysis()"
    flops, bytes_accessed = _cost(compiled)
    prog = Program(name, True, hbm, source, flops, bytes_accessed, seconds)
    if bound:
      text = compiled.as_text()  # megabytes for a full model: read once
      prog.traffic = collectives.traffic(text, num_devices)
      prog.hlo_text = text
      (prog.hbm_traffic, prog.hbm_traffic_source,
       prog.hbm_hlo_text) = hbm_traffic(
          lowered, text, chip, bytes_accessed)
      prog.compile_seconds = time.perf_counter() - t0
    return prog
  finally:
    shutil.rmtree(dump, ignore_errors=True)


def _batch(mesh, size: int, image_shape, *, mask: bool = False) -> dict:
  sh = sharding.batch_sharding(mesh)
  out = {"image": jax.ShapeDtypeStruct((size, *image_shape), jnp.float32,
                                       sharding=sh),
         "label": jax.ShapeDtypeStruct((size,), jnp.int32, sharding=sh)}
  if mask:
    out["mask"] = jax.ShapeDtypeStruct((size,), jnp.bool_, sharding=sh)
  return out


def compile_config(config, topology_name: str, *, batch: int | None = None,
                   programs=("train", "eval", "diagnostics"),
                   dataset_info: dict | None = None) -> Compiled:
  """Compiles ``programs`` of ``config`` for ``topology_name`` (e.g. ``"v5e-256"``).

  ``batch`` overrides ``config.batch_size``; ``dataset_info`` defaults to the
  offline facts of ``softattn.aot.datasets`` (no data is read).
  """
  topo = topology.parse(topology_name)
  devices = topology.abstract_devices(topology_name)
  config = config.copy_and_resolve_references()
  if batch is not None:
    config.batch_size = int(batch)
  info = dataset_info or datasets.dataset_info(config.data)
  cfg, info = configlib.resolve_config(config, num_devices=len(devices),
                                   dataset_info=info)
  model = configlib.build_model(cfg)
  mesh = sharding.make_mesh(cfg.mesh, devices)
  steps_per_epoch = max(int(info["num_train"]) // cfg.batch_size, 1)
  tx, schedule = optim.make_optimizer(cfg, cfg.total_steps, steps_per_epoch)
  state, state_sharding = train.init_state(cfg, model, tx, info, mesh,
                                           abstract=True)
  steps = train.make_steps(cfg, model, tx, schedule, mesh, state_sharding)
  image_shape = tuple(info["image_shape"])
  train_batch = _batch(mesh, cfg.batch_size, image_shape)
  eval_batch = _batch(mesh, cfg.eval.batch_size or cfg.batch_size,
                      image_shape, mask=True)
  calls = {
      "train": (steps.train, state, train_batch),
      "eval": (steps.eval, state["params"], state["batch_stats"], eval_batch),
      "diagnostics": (steps.diagnostics, state, train_batch),
  }
  if not cfg.diagnostics:
    calls.pop("diagnostics")
  out = {}
  for name in programs:
    if name in calls:
      out[name] = compile_program(name, *calls[name], bound=name == "train",
                                  chip=topo.chip, num_devices=len(devices))
  # The global (unpartitioned) step: same function, same shapes.
  jaxpr = jax.make_jaxpr(steps.train)(state, train_batch).jaxpr
  num_params = sum(int(x.size) for x in jax.tree.leaves(state["params"]))
  return Compiled(topo, cfg, info, dict(mesh.shape), num_params,
                  flops_lib.jaxpr_matmul_flops(jaxpr),
                  flops_lib.has_remat(jaxpr), out)
