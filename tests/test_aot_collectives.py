"""The roofline's ICI and HBM terms (softattn.aot.collectives, compile.hbm_traffic).

The accounting is checked on programs whose answer is known by hand: the
parser on HLO text written here, then real TPU programs compiled with libtpu
for a v5e:2x2 slice (4 chips), whose collectives are written out explicitly
with shard_map. Last, the train step under FSDP: its gradients must leave as
reduce-scatters into the parameters' sharding, never full-size all-reduces.
(XLA's CPU backend shows no reduce-scatter even when the gradients are
constrained, so this needs the TPU compiler.)
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from softattn import sharding, topology
from softattn.aot import collectives, roofline
from softattn.sweep import declaration
from tests import libtpu_required

HLO = """\
HloModule m, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%all-reduce-scatter.1 (p: f32[64,16]) -> f32[16,16] {
  %p = f32[64,16]{1,0} parameter(0)
  %ar = f32[64,16]{1,0} all-reduce(%p), channel_id=3, replica_groups=[2,4]<=[8], to_apply=%add
  ROOT %ds = f32[16,16]{1,0} dynamic-slice(%ar, %i, %j), dynamic_slice_sizes={16,16}
}

%cond (t: (s32[], bf16[32])) -> pred[] {
  %t = (s32[], bf16[32]{0}) parameter(0)
  %c = s32[]{:T(128)} constant(7)
  %i = s32[] get-tuple-element(%t), index=0
  ROOT %lt = pred[] compare(%i, %c), direction=LT
}

%body (t: (s32[], bf16[32])) -> (s32[], bf16[32]) {
  %t = (s32[], bf16[32]{0}) parameter(0)
  %x = bf16[32]{0} get-tuple-element(%t), index=1
  %g = bf16[128]{0:T(128)S(1)} all-gather(%x), replica_groups=mesh['x'=2,'y'=4] {'y'}, dimensions={0}
  ROOT %r = (s32[], bf16[32]{0}) tuple(%i, %x)
}

ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %t1 = (f32[8]{0}, f32[4,2]{1,0}) all-reduce(%x, %y), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  %rs = f32[16,16]{1,0} fusion(%z), kind=kCustom, calls=%all-reduce-scatter.1
  %w = (s32[], bf16[32]{0}) while(%t0), condition=%cond, body=%body
  %cp = f32[8]{0} collective-permute(%x), source_target_pairs={{0,1},{1,0}}
  ROOT %all = f32[8]{0} all-reduce(%x), replica_groups={}, to_apply=%add
}
"""


def test_parser_counts_hand_written_hlo():
  got = {c.name: c for c in collectives.parse(HLO, num_devices=8)[0]}
  assert set(got) == {"t1", "ar", "g", "cp", "all"}
  # A tuple all-reduce: both arrays, groups of 2: 2 R (n-1)/n = R.
  assert (got["t1"].kind, got["t1"].result_bytes, got["t1"].group) == (
      "all-reduce", 4 * (8 + 8), 2)
  assert got["t1"].ici_bytes == 64
  # The all-reduce inside an all-reduce-scatter fusion is its reduce-scatter:
  # input 64x16 f32 over 4 chips -> a 16x16 shard; sends 3 shards.
  assert (got["ar"].kind, got["ar"].result_bytes, got["ar"].group) == (
      "reduce-scatter", 16 * 16 * 4, 4)
  assert got["ar"].ici_bytes == 3 * 16 * 16 * 4
  # In a loop of 7 (counter < 7): a mesh-form group over 'y' (4 chips).
  assert (got["g"].kind, got["g"].group, got["g"].count) == ("all-gather", 4, 7)
  assert got["g"].ici_bytes == 7 * 128 * 2 * 3 / 4
  assert (got["cp"].kind, got["cp"].ici_bytes) == ("collective-permute", 32)
  # replica_groups={} means every device.
  assert got["all"].group == 8 and got["all"].ici_bytes == 2 * 32 * 7 / 8
  t = collectives.traffic(HLO, 8)
  assert t.ici_bytes == pytest.approx(sum(c.ici_bytes for c in got.values()))
  assert t.by_kind()["all-reduce"] == (2, 64 + 2 * 32 * 7 / 8)
  assert not t.unknown_loops


def test_loop_without_a_readable_trip_count_is_counted_once_and_said():
  hlo = HLO.replace("constant(7)", "parameter(1)")
  t = collectives.traffic(hlo, 8)
  g = next(c for c in t.collectives if c.name == "g")
  assert g.count == 1 and t.unknown_loops == ("w",)
  assert "unknown trip count" in t.describe()


def test_every_chip_has_an_ici_bandwidth_below_its_hbm_bandwidth():
  for chip in topology.CHIPS.values():
    assert 0 < chip.ici_bytes_per_s < chip.hbm_bytes_per_s, chip.name
  t = roofline.terms(197e12, 819e9, 400e9, topology.CHIPS["v5e"])
  assert t == pytest.approx({"compute": 1.0, "HBM": 1.0, "ICI": 2.0})


def test_compiled_collectives_match_the_hand_count():
  libtpu_required.require_libtpu()
  mesh = Mesh(np.asarray(topology.abstract_devices("v5e:2x2")), ("data",))

  @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P("data"), P(), P()),
                     out_specs=(P(), P(), P("data")), check_vma=False)
  def explicit(x, y, z):
    return (jax.lax.all_gather(x, "data", tiled=True), jax.lax.psum(y, "data"),
            jax.lax.psum_scatter(z, "data", tiled=True))

  @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(),), out_specs=P(),
                     check_vma=False)
  def looped(y):
    body = lambda a, _: (jnp.sin(jax.lax.psum(a, "data")), None)
    return jax.lax.scan(body, y, None, length=5)[0]

  def arg(shape, spec):
    return jax.ShapeDtypeStruct(shape, jnp.float32,
                                sharding=NamedSharding(mesh, spec))
  text = jax.jit(explicit).lower(arg((1024, 128), P("data")),
                                 arg((128, 128), P()),
                                 arg((512, 128), P())).compile().as_text()
  kib = 1024
  assert collectives.traffic(text, 4).by_kind() == {
      "all-gather": (1, 512 * kib * 3 / 4),     # 1024x128 f32 result
      "reduce-scatter": (1, 64 * kib * 3),      # 128x128 f32 shard
      "all-reduce": (1, 2 * 64 * kib * 3 / 4),  # 128x128 f32
  }
  text = jax.jit(looped).lower(arg((128, 128), P())).compile().as_text()
  assert collectives.traffic(text, 4).by_kind() == {
      "all-reduce": (5, 5 * 2 * 64 * kib * 3 / 4)}


@pytest.mark.parametrize("topo,model,stages", [
    ("v5e:2x4", 1, (8,)), ("v5e:4x4", 1, (4, 4)), ("v5e-256", 1, (16, 16)),
    ("v4-32", 1, (4, 4)), ("2xv5e-256", 1, (2, 16, 16)),
    ("v5e:4x4", 2, (8,))])
def test_reduction_stages_follow_the_slice(topo, model, stages):
  libtpu_required.require_libtpu()
  devices = topology.abstract_devices(topo)
  mesh = sharding.make_mesh(dict(data=-1, model=model), devices)
  assert sharding.reduction_stages(mesh) == stages
  # physical_order: row-major over (slice, z, y, x), x fastest.
  places = [(getattr(d, "slice_index", 0) or 0, *reversed(d.coords))
            for d in mesh.devices.flat]
  assert places == sorted(places)
  # Any other order is not a box the stages can factor: one stage.
  shuffled = Mesh(mesh.devices.reshape(-1)[::-1].reshape(mesh.devices.shape),
                  sharding.AXES)
  assert sharding.reduction_stages(shuffled) == (
      (mesh.shape["data"],) if len(stages) > 1 else stages)


def test_reduction_stages_are_one_off_a_tpu():
  cpu = jax.devices("cpu")
  mesh = sharding.make_mesh(dict(data=-1, model=1), cpu)
  assert sharding.reduction_stages(mesh) == (len(cpu),)
  assert sharding.physical_order(cpu) == cpu
  sh = NamedSharding(mesh, P(None, "data"))
  assert sharding.reduction_chain(sh) == [sh]


# v5e:4x4 (16 chips) needs sharding.reduction_stages: in one stage the TPU
# compiler makes a 4x4 reduce-scatter a full all-reduce.
@pytest.mark.parametrize("topo", ["v5e:2x2", "v5e:4x4"])
def test_fsdp_gradients_are_reduce_scattered_and_the_bound_reads_them(topo):
  libtpu_required.require_libtpu()
  from softattn import aot  # pylint: disable=g-import-not-at-top
  cfg = declaration.config_from_file("configs/quickstart.py",
                                     "width=256,depth=1")
  with cfg.unlocked():
    cfg.model.implementation = "dense"
    cfg.sharding_rules = [(".*", "fsdp")]
    cfg.eval.batch_size = 1024
  c = aot.compile_config(cfg, topo, programs=("train",))
  train = c.programs["train"]
  kinds = train.traffic.by_kind()
  # The MLP kernels (256x512 f32, 512 KiB each) are the largest gradients:
  # they leave as reduce-scatters; what stays an all-reduce is small
  # tensors XLA combines (biases, norms) and scalars (loss, norms). Before
  # sharding.constrain_like_params every gradient was all-reduced in full
  # (one 2.1 MB all-reduce here).
  mlp = 256 * 512 * 4
  assert kinds["reduce-scatter"][1] >= 2 * mlp * 3 / 4
  for coll in train.traffic.collectives:
    if coll.kind == "all-reduce":
      assert coll.result_bytes < mlp, coll
  # On 16 chips in two stages of 4 (sharding.reduction_chain), and no
  # activations moved instead (an all-to-all, when vectors were staged).
  # (4 chips: one stage of 4).
  assert {c.group for c in train.traffic.collectives
          if c.kind == "reduce-scatter"} == {4}
  assert "all-to-all" not in kinds
  # The weights are all-gathered for the forward (ZeRO-3).
  assert kinds["all-gather"][1] > 0
  # v5e stages through VMEM: the bound's HBM figure is the staging-off
  # compile's, below XLA's raw count, with the same FLOPs.
  assert "memory_space_assignment=false" in train.hbm_traffic_source
  assert 0 < train.hbm_traffic < train.bytes_accessed
  # ... and the HLO kept beside it (for benchmarks/hlo_diff.py) is that
  # compile's: no VMEM-resident buffer (S(1)), unlike the staged program.
  assert "S(1)" in train.hlo_text and "S(1)" not in train.hbm_hlo_text
  e = roofline.estimate(c)
  assert e.ici_bytes == pytest.approx(train.traffic.ici_bytes)
  assert e.step_seconds == max(e.compute_seconds, e.hbm_seconds, e.ici_seconds)
  text = roofline.describe(c)
  assert "reduce-scatter x" in text and "raw bytes accessed" in text
