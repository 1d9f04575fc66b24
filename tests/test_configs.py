"""Every config in configs/ builds, and its runlocal form trains and evaluates."""

import glob
import json
import os
import sys

import jax
import numpy as np
import pytest

from softattn import configlib, models, normalizers

sys.path.insert(0, os.path.dirname(__file__))
import train_runner  # pylint: disable=g-import-not-at-top,wrong-import-position

CONFIGS = sorted(os.path.relpath(p, train_runner.REPO) for p in glob.glob(
    os.path.join(train_runner.REPO, "configs", "*.py")))


def test_the_expected_configs_exist():
  names = {os.path.basename(c) for c in CONFIGS}
  assert {"quickstart.py", "cifar10_vit.py", "imagenet_resnet50.py",
          "i21k_vit.py"} <= names


@pytest.mark.parametrize("path", CONFIGS)
def test_full_config_is_consistent(path):
  config = train_runner.load_config(path)
  configlib.check_keys(config)
  assert config.model_name in models.names()
  if config.model.get("normalizer", None):
    normalizers.get(config.model.normalizer)
  configlib.build_model(config)  # classes from the dataset's offline facts
  assert config.total_steps or config.num_epochs


@pytest.mark.parametrize("path", CONFIGS)
def test_runlocal_trains_a_step_and_evaluates(tmp_path, path):
  final = train_runner.run(dict(
      config=f"{path}:runlocal", workdir=str(tmp_path),
      overrides={"checkpoint_async": False, "verbose": False}, num_examples=8))
  assert np.isfinite(final["train_loss"]) and np.isfinite(final["eval_loss"])
  status = json.load(open(tmp_path / "status.json"))
  assert status["state"] == "done" and status["step"] >= 1


def test_i21k_bf16_recipe_trains_with_float32_master_weights(tmp_path):
  cfg = train_runner.load_config("configs/i21k_vit.py:variant=B/16,dtype=bfloat16")
  assert cfg.compute_dtype == "bfloat16" and cfg.optimizer.mu_dtype == "bfloat16"
  assert train_runner.load_config("configs/i21k_vit.py").compute_dtype == "float32"
  final = train_runner.run(dict(
      config="configs/i21k_vit.py:runlocal,dtype=bfloat16",
      workdir=str(tmp_path), num_examples=8,
      overrides={"checkpoint_async": False, "verbose": False}))
  assert np.isfinite(final["train_loss"]) and np.isfinite(final["eval_loss"])
  from softattn import init_from  # pylint: disable=g-import-not-at-top
  params = init_from.read_orbax(str(tmp_path))["params"]
  assert {np.asarray(x).dtype for x in jax.tree.leaves(params)} == {
      np.dtype(np.float32)}


def test_i21k_config_reports_i1k_accuracy_through_the_class_table(tmp_path):
  from softattn import evaluate  # pylint: disable=g-import-not-at-top
  # A stand-in 21k label space: the i1k wnids plus extras, sorted (big_vision's
  # ordering), so i1k class j sits at a different index in the model's output.
  wnids = sorted(evaluate.i1k_wnids() + [f"n99{i:06d}" for i in range(24)])
  (tmp_path / "wnids.txt").write_text("\n".join(wnids))
  config = train_runner.load_config("configs/i21k_vit.py:runlocal")
  final = train_runner.run(dict(
      config="configs/i21k_vit.py:runlocal", workdir=str(tmp_path / "wd"),
      overrides={"checkpoint_async": False, "verbose": False,
                 "model.num_classes": len(wnids), "eval.i1k_from_i21k": True,
                 "eval.i21k_wnids_file": str(tmp_path / "wnids.txt"),
                 "eval.i1k_data": dict(config.data.to_dict())},
      num_examples=8))
  assert 0.0 <= final["eval_i1k_accuracy"] <= 1.0
  assert np.isfinite(final["eval_loss"])


def test_attention_variants_flow_from_the_config_arguments():
  cfg = train_runner.load_config(
      "configs/cifar10_vit.py:differential,output_gate=headwise,depth=2,"
      "normalizer=stablemax")
  model = configlib.build_model(cfg)
  shapes = jax.eval_shape(model.init, jax.random.key(0),
                          jax.numpy.zeros((1, 32, 32, 3)))["params"]
  layer = shapes["Transformer"]["encoderblock_1"][
      "MultiHeadDotProductAttention_0"]
  assert layer["output_gate"]["kernel"].shape == (256, 8, 1)
  assert layer["lambda_q1"].shape == (16,)  # 8 heads of 32: halves of 16
  plain = train_runner.load_config("configs/cifar10_vit.py")
  assert plain.model.differential is False and plain.model.output_gate is None
