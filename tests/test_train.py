"""End-to-end tests of the training loop on TFDS mock data (tiny ViT, few steps)."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from softattn import configlib, metrics, train

sys.path.insert(0, os.path.dirname(__file__))
import tiny_data  # pylint: disable=g-import-not-at-top,wrong-import-position
import train_runner  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = train_runner.REPO
QUICK = "configs/quickstart.py:runlocal"
# Async saves and tfds.testing.mock_data's temporary file-system patch race
# (the patch is global while a dataset is opened), so the tests save
# synchronously; the async path is the same Orbax call.
BASE = {"checkpoint_async": False, "verbose": False}


def _spec(workdir, **kw):
  overrides = dict(BASE, **kw.pop("overrides", {}))
  return dict(config=kw.pop("config", QUICK), overrides=overrides,
              workdir=str(workdir), num_examples=kw.pop("num_examples", 20), **kw)


def _subprocess(spec, env_extra=None, check=True):
  env = dict(os.environ, **(env_extra or {}))
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "tests", "train_runner.py"),
       json.dumps(spec)], env=env, cwd=REPO, capture_output=True, text=True,
      timeout=300)
  if check and proc.returncode != 0:
    raise AssertionError(f"runner failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
  return proc


# One uninterrupted reference run serves the end-to-end checks and both
# resume comparisons (params do not depend on log/eval/checkpoint cadence).
RESUME = {"total_steps": 6, "checkpoint_every": 2, "log_every": 3,
          "eval_every": 6}


# The reference run also evaluates few-shot (its config is the one a rerun
# of it must repeat: a changed config is refused on resume).
STRAIGHT = dict(RESUME, fewshot={"datasets": {"fmnist": dict(
    name="fashion_mnist", data_dir=None, train_split="train",
    eval_split="test", pp_train="value_range(-1, 1)",
    pp_eval="value_range(-1, 1)", shuffle_buffer=1, cache=False)},
                                  "shots": [1, 2], "seeds": 2, "l2_reg": 1.0,
                                  "batch_size": 8})


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
  """A persistent XLA cache shared by the runs (and subprocesses) of this module."""
  with tiny_data.compile_cache(str(tmp_path_factory.mktemp("xla_cache")),
                               0.5) as d:
    yield d


@pytest.fixture(scope="module")
def straight(tmp_path_factory, compile_cache):
  del compile_cache
  wd = tmp_path_factory.mktemp("straight")
  final = train_runner.run(_spec(wd, overrides=STRAIGHT, num_examples=20))
  return wd, final


def test_end_to_end_train_eval_checkpoint(straight):
  wd, final = straight
  # 20 eval examples in batches of 8: the padded last batch counts 4, not 8.
  assert final["eval_num_examples"] == 20.0
  assert 0.0 <= final["eval_accuracy"] <= 1.0 and np.isfinite(final["eval_loss"])
  status = json.load(open(wd / "status.json"))
  assert status["state"] == "done" and status["step"] == 6 and not status["kind"]
  assert status["flops_per_step"] > 0 and status["core_seconds"] > 0
  assert status["wall_seconds"] > 0
  assert status["final"]["eval_accuracy"] == final["eval_accuracy"]
  assert json.load(open(wd / "config.json"))["model"]["num_classes"] == 10
  assert any(f.startswith("events.out.tfevents") for f in os.listdir(wd))
  # keep_checkpoints=2 in the quickstart config: step 2 was rotated out.
  assert sorted(int(s) for s in os.listdir(wd / "checkpoints")) == [4, 6]

  recs = metrics.read_jsonl(str(wd / "metrics.jsonl"))
  assert all("step" in r and r["split"] in ("train", "eval", "info") for r in recs)
  train_recs = [r for r in recs if r["split"] == "train" and "loss" in r]
  assert [r["step"] for r in train_recs] == [3, 6]
  diag = train_recs[-1]
  for key in ("score_std", "attn_entropy", "grad_saturation", "score_q99",
              "lgrad_q01"):
    vals = [v for k, v in diag.items() if k.startswith("diag/") and k.endswith(key)]
    assert vals and all(np.isfinite(v) for v in vals), key
  assert any(k.startswith("grad_norm/") for k in diag)
  assert any(k.startswith("param_norm/") for k in diag)
  assert [r["step"] for r in recs if r["split"] == "eval"] == [6]
  assert any(r["split"] == "info" and r.get("num_params", 0) > 0 for r in recs)
  # Few-shot linear probe on the pre-logits ran at the end.
  for k in (1, 2):
    assert 0.0 <= final[f"eval_fewshot_fmnist_{k}shot"] <= 1.0


def test_quickstart_plot_writes_a_png(straight, tmp_path):
  from softattn import quickstart  # pylint: disable=g-import-not-at-top
  out = tmp_path / "curves.png"
  quickstart.plot_curves({"softmax": str(straight[0])}, str(out))
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_rerun_of_a_finished_run_only_reevaluates(straight, tmp_path):
  wd, final = straight
  import shutil  # pylint: disable=g-import-not-at-top
  copy = tmp_path / "copy"
  shutil.copytree(wd, copy)
  again = train_runner.run(_spec(copy, overrides=STRAIGHT))
  assert again["eval_accuracy"] == final["eval_accuracy"]
  steps = [r["step"] for r in metrics.read_jsonl(str(copy / "metrics.jsonl"), "train")]
  assert max(steps) == 6 and steps.count(6) == 1  # no step was trained again


def test_init_from_another_run_loads_its_weights(straight, tmp_path):
  # lr 0: one step leaves the params where init_from put them. The learnable
  # NormSoftmax adds parameters the checkpoint lacks: they stay fresh.
  over = dict(BASE, total_steps=1, log_every=1, eval_every=1,
              checkpoint_every=1, **{"schedule.base_lr": 0.0,
                                     "schedule.warmup_steps": 0,
                                     "model.normalizer": "normsoftmax_learnable",
                                     "init_from.path": str(straight[0])})
  train_runner.run(_spec(tmp_path, overrides=over))
  _, src = train_runner.final_params(straight[0])
  _, got = train_runner.final_params(tmp_path)
  flat = lambda t: {jax.tree_util.keystr(p, simple=True, separator="/"): v
                    for p, v in jax.tree_util.tree_flatten_with_path(t)[0]}
  src, got = flat(src), flat(got)
  new = sorted(set(got) - set(src))
  assert new and all(k.endswith("/norm_w") for k in new), new
  for k, v in src.items():
    np.testing.assert_array_equal(got[k], v, err_msg=k)
  text = [r for r in metrics.read_jsonl(str(tmp_path / "metrics.jsonl"), "info")
          if "init_from" in r]
  assert text and f"{len(src)} weights loaded" in text[0]["init_from"]


def test_init_from_a_mismatched_run_fails_before_training(straight, tmp_path):
  over = dict(BASE, total_steps=1, **{"model.width": 24,
                                      "init_from.path": str(straight[0])})
  with pytest.raises(ValueError, match="shape mismatch.*init_from.skip"):
    train_runner.run(_spec(tmp_path, overrides=over))
  assert not os.path.exists(tmp_path / "checkpoints" / "1")


def test_sigterm_saves_and_resume_is_bitwise_identical(straight, tmp_path):
  # SIGTERM while fetching step 2's batch: step 2 still runs, then it saves
  # step 3 (not a multiple of checkpoint_every) and returns.
  train_runner.run(_spec(tmp_path, overrides=RESUME, kill_at_step=2,
                         kill_signal="SIGTERM"))
  status = json.load(open(tmp_path / "status.json"))
  assert status["state"] == "preempted" and status["step"] == 3
  assert status["saved_step"] == 3  # the step reported is on disk
  assert "SIGTERM" in status["message"]
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2", "3"]
  train_runner.run(_spec(tmp_path, overrides=RESUME))
  s1, p1 = train_runner.final_params(straight[0])
  s2, p2 = train_runner.final_params(tmp_path)
  assert s1 == s2 == 6
  train_runner.assert_bitwise_equal(p1, p2)
  # The times add up over the two attempts (each compiles, so more than 1x).
  resumed = json.load(open(tmp_path / "status.json"))
  for k in ("wall_seconds", "core_seconds"):
    assert resumed[k] > status[k] > 0, k


def test_sigkill_mid_run_then_resume_is_bitwise_identical(straight, tmp_path,
                                                          compile_cache):
  killed = _subprocess(_spec(tmp_path, overrides=RESUME, kill_at_step=3),
                       env_extra={"JAX_COMPILATION_CACHE_DIR": compile_cache},
                       check=False)
  assert killed.returncode == -9, killed.stderr[-2000:]
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2"]
  status = json.load(open(tmp_path / "status.json"))
  assert status["state"] == "running"  # nobody said otherwise: resumable
  train_runner.run(_spec(tmp_path, overrides=RESUME))
  s1, p1 = train_runner.final_params(straight[0])
  s2, p2 = train_runner.final_params(tmp_path)
  assert s1 == s2 == 6
  train_runner.assert_bitwise_equal(p1, p2)


def test_ema_bf16_compute_and_param_groups(tmp_path, compile_cache):
  del compile_cache
  final = train_runner.run(_spec(tmp_path, overrides={
      "total_steps": 2, "log_every": 1, "eval_every": 2, "checkpoint_every": 2,
      "optimizer.ema_decay": 0.9, "compute_dtype": "bfloat16",
      "optimizer.groups": [dict(pattern="MultiHeadDotProductAttention",
                                name="sgd", base_lr=0.1, momentum=0.0)]}))
  assert np.isfinite(final["eval_loss"]) and np.isfinite(final["eval_ema_loss"])
  _, params = train_runner.final_params(tmp_path)
  assert all(p.dtype == np.float32 for p in jax.tree.leaves(params))  # fp32 master


def test_diverging_normalizer_stops_with_step_and_keeps_last_good(tmp_path,
                                                                  compile_cache):
  del compile_cache
  wd = tmp_path / "nan"
  # lr 0 at step 0 (warmup from 0), so the checkpoint after step 1 is sane;
  # then sin_max with an absurd lr overflows.
  over = {"model.normalizer": "sin_max", "total_steps": 8, "checkpoint_every": 1,
          "log_every": 0, "eval_every": 0, "schedule.name": "warmup_cosine",
          "schedule.base_lr": 1e30, "schedule.warmup_steps": 1,
          "optimizer.grad_clip_norm": None}
  with pytest.raises(train.NonFiniteError) as e:
    train_runner.run(_spec(wd, overrides=over))
  msg = str(e.value)
  assert "Non-finite training at step" in msg and "loss=" in msg and "grad_norm=" in msg
  bad_step = int(msg.split("at step ")[1].split(":")[0])
  status = json.load(open(wd / "status.json"))
  assert (status["state"], status["kind"], status["step"]) == (
      "failed", "nonfinite", bad_step) and status["message"] == msg
  last, params = train_runner.final_params(wd)
  assert 1 <= last < bad_step
  assert f"last good checkpoint is step {last}" in msg
  assert all(np.all(np.isfinite(p)) for p in jax.tree.leaves(params))


def test_multi_device_mesh_matches_single_device(tmp_path, compile_cache):
  common = {"total_steps": 3, "log_every": 1, "eval_every": 3,
            "checkpoint_every": 3, "batch_size": 8}
  code = f"""
import json, sys
sys.path.insert(0, {os.path.join(REPO, 'tests')!r})
import jax, train_runner
from softattn import metrics
assert jax.device_count() == 8, jax.devices()
out = {{}}
for name, mesh, rules in [("one", {{"data": 1, "model": 1}}, [[".*", "replicate"]]),
                          ("mesh", {{"data": 4, "model": 2}}, [[".*", "fsdp_tp"]])]:
  wd = {str(tmp_path)!r} + "/" + name
  over = dict(json.loads({json.dumps(json.dumps(dict(BASE, **common)))}), **{{"mesh": mesh, "sharding_rules": rules}})
  final = train_runner.run(dict(config={QUICK!r}, overrides=over, workdir=wd,
                                num_examples=24))
  losses = [r["loss"] for r in metrics.read_jsonl(wd + "/metrics.jsonl", "train") if "loss" in r]
  out[name] = dict(losses=losses, eval=final["eval_loss"])
# The (4, 2) run really split the parameters: rebuild its state shardings
# (on the mock dataset's info, as the runs: no prepared TFDS copy needed).
import tensorflow_datasets as tfds
from softattn import configlib, optim, sharding, train
with tfds.testing.mock_data(num_examples=24):
  cfg, info = configlib.resolve_config(train_runner.apply_overrides(
      train_runner.load_config({QUICK!r}),
      {{"mesh": {{"data": 4, "model": 2}}, "sharding_rules": [[".*", "fsdp_tp"]]}}))
mesh = sharding.make_mesh(cfg.mesh)
state, _ = train.init_state(cfg, configlib.build_model(cfg), optim.make_optimizer(cfg, 3)[0], info, mesh)
specs = [tuple(x.sharding.spec) for x in jax.tree.leaves(state["params"])]
out["specs"] = [str(s) for s in specs]
print("RESULT" + json.dumps(out))
"""
  env = dict(os.environ, XLA_FLAGS=tiny_data.xla_flags(devices=8),
             TF_CPP_MIN_LOG_LEVEL="2", JAX_COMPILATION_CACHE_DIR=compile_cache)
  proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-4000:]
  res = json.loads(proc.stdout.split("RESULT")[-1])
  assert len(res["one"]["losses"]) == 3
  np.testing.assert_allclose(res["mesh"]["losses"], res["one"]["losses"], rtol=1e-5)
  np.testing.assert_allclose(res["mesh"]["eval"], res["one"]["eval"], rtol=1e-5)
  assert any("'data'" in s and "'model'" in s for s in res["specs"]), res["specs"]


@pytest.mark.parametrize("override, match", [
    ({"totl_steps": 5}, "Unknown config key"),
    ({"model.normalizer": "softmaxx"}, "config.model.normalizer"),
    ({"loss.name": "xent"}, "config.loss.name"),
    ({"optimizer.lr": 0.1}, "in config.optimizer"),
])
def test_config_errors_are_one_line_and_precede_compilation(tmp_path, override, match):
  config = train_runner.apply_overrides(train_runner.load_config(QUICK), override)
  with pytest.raises(configlib.ConfigError, match=match) as e:
    train.train_and_evaluate(config, str(tmp_path / "wd"))
  assert "\n" not in str(e.value)
  assert not (tmp_path / "wd").exists()  # nothing was set up, let alone compiled


def test_batch_not_divisible_and_missing_dataset(tmp_path):
  config = train_runner.load_config(QUICK)
  config.batch_size = 6
  with pytest.raises(configlib.ConfigError, match="multiple of 4"):
    configlib.resolve_config(config, num_devices=4)
  config = train_runner.load_config(QUICK)
  config.data.name = "cifar10"
  config.data.data_dir = str(tmp_path / "empty")
  with pytest.raises(configlib.ConfigError, match="cifar10") as e:
    train.train_and_evaluate(config, str(tmp_path / "wd"))
  assert "\n" not in str(e.value)


def test_cli_reports_config_error_in_one_line(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "softattn.main", f"--config={QUICK}",
       f"--workdir={tmp_path / 'wd'}", "--config.model.normalizer=nope",
       # Fields whose default is None still take overrides (typed placeholders).
       "--config.total_steps=2", "--config.optimizer.grad_clip_norm=0.5",
       "--config.eval.batch_size=8", f"--config.data.data_dir={tmp_path}"],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 2, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("config error: config.model.normalizer='nope'")


def test_num_epochs_sets_total_steps_from_the_dataset_size():
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  config = train_runner.load_config(QUICK)
  config.total_steps = None
  config.num_epochs = 0.5
  with tfds.testing.mock_data(num_examples=4):
    cfg, info = configlib.resolve_config(config)
  assert info["num_train"] > 0
  assert cfg.total_steps == int(np.ceil(0.5 * info["num_train"] / cfg.batch_size))
  config.num_epochs = None
  with pytest.raises(configlib.ConfigError, match="num_epochs"):
    with tfds.testing.mock_data(num_examples=4):
      configlib.resolve_config(config)
