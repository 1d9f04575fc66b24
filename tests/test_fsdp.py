"""FSDP and FSDP x TP on 8 fake CPU devices: activations stay batch-sharded.

The i21k config (``sharding_rules=[(".*", "fsdp")]``) at ``variant=Ti/4`` on
32x32 inputs, one block, compiled on meshes of 1, 2, 4 and 8 devices; the
1-device, 8-device fsdp and (4, 2) fsdp_tp programs also run two steps. Before ``sharding.gather_for_compute``
the SPMD partitioner kept global-batch activations on every device (issue 14:
hundreds of ops of the partitioned step had the global batch as their leading
dim with fsdp, and per-device memory did not fall as it should).

The global batch is 40, not issue 14's 96: with Ti (width 192, MLP 768) a
parameter shard is ``[96, 192]`` on 8 devices (768 / 8) and on 2 (192 / 2),
so counting leading dims of 96 counts parameter shards too. No parameter dim
or shard of this model is 40 or 40 x 64.

The measurements run in one subprocess (fake devices must be set before JAX
starts); the tests below assert on its results.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests import tiny_data

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 40
TOKENS = 64  # (32 / 4) ** 2 patches
INFO = dict(num_classes=10, image_shape=(32, 32, 3), num_train=8000,
            num_eval=800)
CASES = {  # name: (mesh, rules, devices, run steps)
    "one": (dict(data=1, model=1), [(".*", "replicate")], 1, True),
    "fsdp2": (dict(data=2, model=1), [(".*", "fsdp")], 2, False),
    "fsdp4": (dict(data=4, model=1), [(".*", "fsdp")], 4, False),
    "fsdp8": (dict(data=8, model=1), [(".*", "fsdp")], 8, True),
    "fsdp_tp4x2": (dict(data=4, model=2), [(".*", "fsdp_tp")], 8, True),
    # fsdp8 with the gradients reduced in stages of 2 and 4, as
    # sharding.reduction_stages does on TPU slices past 8 chips (CPU devices
    # have no coordinates, so it is forced here): the staged backward
    # (gather_for_compute's custom VJP) must train as the one-device run.
    "fsdp8_staged": (dict(data=8, model=1), [(".*", "fsdp")], 8, True),
}
STEPS = 2


def global_batch_ops(hlo_text: str, batch: int, tokens: int) -> int:
  """Ops whose result's leading dim is the global batch (or batch x tokens)."""
  return len(re.findall(rf"= \w+\[({batch}|{batch * tokens})[,\]]", hlo_text))


def _measure() -> dict:
  """Per case: global-batch op count, temp bytes, losses of STEPS steps."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.join(REPO, "tests"))
  import train_runner  # pylint: disable=g-import-not-at-top
  from softattn import configlib, optim, sharding, train  # pylint: disable=g-import-not-at-top
  from softattn.aot import collectives  # pylint: disable=g-import-not-at-top
  assert jax.device_count() == 8, jax.devices()
  rng = np.random.default_rng(0)
  images = rng.uniform(-1, 1, (BATCH, 32, 32, 3)).astype(np.float32)
  labels = rng.integers(0, INFO["num_classes"], (BATCH,)).astype(np.int32)
  out = {}
  one_stage = sharding.reduction_stages
  for name, (mesh_cfg, rules, ndev, run) in CASES.items():
    sharding.reduction_stages = (lambda mesh: (2, 4)) if name.endswith(
        "_staged") else one_stage
    config = train_runner.load_config("configs/i21k_vit.py:variant=Ti/4")
    config.update(dict(batch_size=BATCH, mesh=mesh_cfg, sharding_rules=rules,
                       total_steps=10, num_epochs=None))
    config.model.depth = 1
    config.eval.batch_size = BATCH
    config.schedule.warmup_steps = 0  # real updates from step 1
    cfg, info = configlib.resolve_config(config, num_devices=ndev,
                                     dataset_info=INFO)
    model = configlib.build_model(cfg)
    mesh = sharding.make_mesh(cfg.mesh, jax.devices()[:ndev])
    tx, schedule = optim.make_optimizer(cfg, cfg.total_steps)
    state, state_sh = train.init_state(cfg, model, tx, info, mesh,
                                       abstract=not run)
    steps = train.make_steps(cfg, model, tx, schedule, mesh, state_sh)
    batch_sh = sharding.batch_sharding(mesh)
    batch = {"image": jax.device_put(jnp.asarray(images), batch_sh),
             "label": jax.device_put(jnp.asarray(labels), batch_sh)}
    compiled = steps.train.lower(state, batch).compile()
    losses = []
    for _ in range(STEPS if run else 0):
      state, metrics = compiled(state, batch)
      losses.append(float(metrics["loss"]))
    out[name] = dict(
        global_batch_ops=global_batch_ops(compiled.as_text(), BATCH, TOKENS),
        reduce_groups=sorted({c.group for c in collectives.parse(
            compiled.as_text(), num_devices=ndev)[0]
                              if c.kind in ("all-reduce", "reduce-scatter")}),
        temp_bytes=int(compiled.memory_analysis().temp_size_in_bytes),
        losses=losses)
  return out


@pytest.fixture(scope="module")
def measured():
  env = dict(os.environ, XLA_FLAGS=tiny_data.xla_flags(devices=8),
             JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=REPO)
  proc = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                        cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.split("RESULT")[-1])


def test_no_op_holds_the_global_batch(measured):
  counts = {k: v["global_batch_ops"] for k, v in measured.items()}
  # The check can fail: on one device every activation has the global batch.
  assert counts["one"] > 100, counts
  assert {k: c for k, c in counts.items() if k != "one"} == {
      "fsdp2": 0, "fsdp4": 0, "fsdp8": 0, "fsdp_tp4x2": 0,
      "fsdp8_staged": 0}, counts


def test_per_device_temp_memory_falls_as_the_data_axis_grows(measured):
  # Activations dominate; split over the batch they halve with each doubling
  # of the data axis (ratio 0.5 ideally; measured ~0.52). With global-batch
  # activations left on every device the 4 -> 8 step only reached 0.66.
  temp = [measured[k]["temp_bytes"] for k in ("one", "fsdp2", "fsdp4", "fsdp8")]
  ratios = [b / a for a, b in zip(temp, temp[1:])]
  assert all(r < 0.6 for r in ratios), (temp, ratios)


def test_losses_equal_the_one_device_run(measured):
  ref = measured["one"]["losses"]
  assert len(ref) == STEPS and ref[0] != ref[-1]  # the steps do update
  for name in ("fsdp8", "fsdp_tp4x2", "fsdp8_staged"):
    np.testing.assert_allclose(measured[name]["losses"], ref, rtol=1e-5,
                               err_msg=name)


def test_staged_reduction_reduces_in_groups_of_each_stage(measured):
  # Stages (2, 4): the gradients are reduced in groups of 2, then of 4 (XLA's
  # CPU backend writes reduce-scatters as all-reduces and slices); only
  # scalars and vectors (norm scales, biases: not staged) span all 8. One
  # stage reduces over all 8 devices.
  assert measured["fsdp8_staged"]["reduce_groups"] == [2, 4, 8]
  assert measured["fsdp8"]["reduce_groups"] == [8]


if __name__ == "__main__":
  print("RESULT" + json.dumps(_measure()))
