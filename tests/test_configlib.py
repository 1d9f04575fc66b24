"""The config layer: import direction, one resolution, one file loader.

``softattn.config_schema`` is the bottom of the import graph (it imports
nothing of softattn; the modules that read a field register its check);
``softattn.configlib.resolve_config`` is the one way to resolve a config, and
``softattn.main`` resolves once: one dataset lookup per invocation.
"""

import ast
import os
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds

from softattn import config_files, config_schema, configlib, data
from tests import test_layers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(REPO, "softattn")
QUICK = os.path.join(REPO, "configs", "quickstart.py")
INFO = dict(num_classes=7, image_shape=(8, 8, 1), num_train=40, num_eval=8)


def test_config_schema_imports_nothing_of_softattn():
  graph = test_layers.import_graph(("softattn",))
  assert graph["softattn.config_schema"] == set()
  # Nothing the config layer imports imports it back (the old
  # config_schema <-> optim <-> sharding cycle).
  for mod in ("softattn.config_schema", "softattn.config_files",
              "softattn.config_overrides", "softattn.configlib"):
    back = [m for m in graph[mod] if mod in test_layers.reachable(graph, m)]
    assert not back, f"{back} import {mod} back"
  # Every module that registers a check is imported by resolve_config.
  registrants = {m for m in graph if m != "softattn.config_schema" and any(
      isinstance(n, ast.Attribute) and n.attr.startswith("register_") and
      isinstance(n.value, ast.Name) and n.value.id == "config_schema"
      for n in ast.walk(ast.parse(open(
          os.path.join(REPO, *m.split(".")) + (
              "/__init__.py" if os.path.isdir(os.path.join(REPO, *m.split(".")))
              else ".py"), encoding="utf-8").read())))}
  assert {"softattn.optim", "softattn.losses", "softattn.sharding",
          "softattn.steps", "softattn.normalizers.registry"} <= registrants
  assert registrants <= test_layers.reachable(graph, "softattn.configlib")


def test_config_schema_loads_alone_and_refuses_to_skip_checks():
  """Loaded as a lone file (no softattn package at all) it works, loads no
  softattn module, and with no owner imported it refuses to resolve rather
  than skip the name checks."""
  code = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location(
    "lone_schema", {os.path.join(PKG, "config_schema.py")!r})
schema = importlib.util.module_from_spec(spec)
spec.loader.exec_module(schema)
assert not [m for m in sys.modules if m.startswith("softattn")], sys.modules
cfg = schema.merged(schema.check_keys(schema.default_config()))
try:
  schema.check_fields(cfg)
except schema.ConfigError as e:
  print("ERROR", e)
"""
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=120, cwd="/")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "ERROR no check registered for config field(s) ['loss'," in proc.stdout
  assert "softattn.configlib.resolve_config" in proc.stdout


def test_a_check_for_an_undeclared_field_is_refused():
  with pytest.raises(ValueError, match=r"'model\.dropout' is not in "
                     r"config_schema\.CHECKED"):
    config_schema.register_names("model.dropout", ["0.1"])


def _config():
  config = configlib.default_config()
  config.data.name = "fashion_mnist"
  config.num_epochs = 2.0
  config.batch_size = 8
  return config


def test_resolve_config_is_idempotent_and_looks_the_dataset_up_once(
    monkeypatch):
  calls = []
  monkeypatch.setattr(data, "dataset_info",
                      lambda data_config: calls.append(1) or dict(INFO))
  resolved = configlib.resolve_config(_config(), num_devices=1)
  assert len(calls) == 1
  cfg, info = resolved
  assert info == INFO and cfg.total_steps == 10 and cfg.model.num_classes == 7
  assert configlib.resolve_config(resolved) is resolved
  again = configlib.resolve_config(resolved, num_devices=2)
  assert len(calls) == 1  # checked for 2 devices on its own dataset facts
  assert again.config.to_dict() == cfg.to_dict() and again.dataset_info == INFO
  twice = configlib.resolve_config(cfg, num_devices=1)
  assert twice.config.to_dict() == cfg.to_dict() and len(calls) == 2
  with pytest.raises(configlib.ConfigError, match="multiple of 3"):
    configlib.resolve_config(resolved, num_devices=3)


def test_main_looks_the_dataset_up_once(tmp_path, monkeypatch):
  """The command line resolves the config once (check_config) and hands the
  resolved config to train_and_evaluate: one dataset lookup per invocation.

  The loop itself (``train._run``, which reads batches but looks nothing up)
  is replaced by a recorder so that this stays a check of the resolution, not
  a training run (tests/test_configs.py trains each runlocal config)."""
  from softattn import main as cli, train  # pylint: disable=g-import-not-at-top
  real, calls = data.dataset_info, []
  monkeypatch.setattr(data, "dataset_info", lambda data_config: calls.append(
      data_config.name) or real(data_config))
  ran = []
  monkeypatch.setattr(train, "_run", lambda cfg, info, *args: ran.append(
      (cfg, info)) or {})
  argv = ["softattn.main", f"--config={QUICK}:runlocal",
          f"--workdir={tmp_path}", "--config.total_steps=1"]
  with tfds.testing.mock_data(num_examples=4):
    cli.main(cli._parse_flags(argv))  # pylint: disable=protected-access
  assert calls == ["fashion_mnist"]
  (cfg, info), = ran
  assert cfg.total_steps == 1 and cfg.model.num_classes == info["num_classes"]


def test_load_module_runs_each_file_under_a_name_of_its_own(tmp_path):
  for d in ("a", "b"):
    (tmp_path / d).mkdir()
    (tmp_path / d / "sweep.py").write_text(f"WHO = {d!r}\n")
  a = config_files.load_module(str(tmp_path / "a" / "sweep.py"))
  b = config_files.load_module(str(tmp_path / "b" / "sweep.py"))
  assert (a.WHO, b.WHO) == ("a", "b") and a.__name__ != b.__name__
  with pytest.raises(ValueError, match=r"defines no get_config\(arg\)"):
    config_files.config_module(str(tmp_path / "a" / "sweep.py"))
  with pytest.raises(ValueError, match=r"not found; config files in .*/a/: "
                     r"sweep\.py\.$"):
    config_files.load_module(str(tmp_path / "a" / "swep.py"))
