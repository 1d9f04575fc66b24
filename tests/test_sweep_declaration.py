"""Sweep declaration: grid helpers, run names, override checks, commands, launch."""

import os
import shlex
import textwrap

import pytest

from softattn.sweep import __main__ as cli
from softattn.sweep import declaration, grid, launch

BASE = """
import ml_collections
from softattn.sweep import grid

def get_config(arg=None):
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.total_steps = 100
  c.lr = 1e-3
  c.flag = True
  c.nothing = None
  c.model = ml_collections.ConfigDict(dict(variant="Ti/4", normalizer="softmax"))
  c.data = ml_collections.ConfigDict(dict(name="fashion_mnist"))
  return c
"""


def _write_sweep(tmp_path, body, name="sw.py"):
  path = tmp_path / name
  path.write_text(BASE + textwrap.dedent(body))
  return str(path)


def test_product_sweep_zip_chain():
  s = grid.product(grid.sweep("a", [1, 2]), grid.sweep("b", ["x", "y"]),
                   grid.fixed("c", 0))
  assert s == [{"a": 1, "b": "x", "c": 0}, {"a": 1, "b": "y", "c": 0},
               {"a": 2, "b": "x", "c": 0}, {"a": 2, "b": "y", "c": 0}]
  z = grid.zip_(grid.sweep("w", [32, 64]), grid.sweep("d", [1, 2]))
  assert z == [{"w": 32, "d": 1}, {"w": 64, "d": 2}]
  assert len(grid.chain(s, z)) == 6
  with pytest.raises(ValueError, match="both set"):
    grid.product(grid.sweep("a", [1]), grid.sweep("a", [2]))
  with pytest.raises(ValueError, match="equal length"):
    grid.zip_(grid.sweep("a", [1, 2]), grid.sweep("b", [1]))
  with pytest.raises(ValueError, match="no values"):
    grid.sweep("a", [])


def test_run_names_are_stable_unique_and_safe():
  s = grid.product(
      grid.sweep("model.variant", ["mu/7", "Ti/4"]),
      grid.sweep("model.normalizer",
                 ["softmax", "normsoftmax(gamma=sqrt_d)", "normsoftmax(gamma=inf)"]),
      grid.fixed("total_steps", 10))
  names = grid.run_names(s)
  assert names == grid.run_names([dict(o) for o in s])  # deterministic
  assert len(set(names)) == len(names) == 6
  assert names[0] == "variant-mu7__normalizer-softmax"  # constant fields omitted
  assert names[4] == "variant-Ti4__normalizer-normsoftmax.gamma.sqrt_d"
  assert all(n == shlex.quote(n) and "/" not in n for n in names)
  # Fields sharing a last component keep their full path.
  assert grid.run_names(grid.product(grid.sweep("a.x", [1, 2]),
                                     grid.sweep("b.x", [3, 4])))[:2] == [
                                         "a-x-1__b-x-3", "a-x-1__b-x-4"]
  # Values that only differ in characters names drop still get unique names.
  clash = grid.run_names(grid.sweep("n", ["a(b)", "a[b]"]))
  assert len(set(clash)) == 2 and clash[0].startswith("n-a.b__")


def test_load_resolves_each_run_and_builds_its_command(tmp_path):
  path = _write_sweep(tmp_path, """
      def get_sweep(arg=None):
        return grid.product(grid.sweep("model.normalizer", ["softmax", "relu"]),
                            grid.sweep("seed", [0, 1]))
      """)
  sweep = declaration.load(path + ":demo", extra=["total_steps=7", "lr=0.5"])
  assert sweep.config_flag == path + ":demo"
  assert [r.name for r in sweep.runs] == [
      "normalizer-softmax__seed-0", "normalizer-softmax__seed-1",
      "normalizer-relu__seed-0", "normalizer-relu__seed-1"]
  run = sweep.runs[3]
  assert run.config.model.normalizer == "relu" and run.config.seed == 1
  assert run.config.total_steps == 7 and run.config.lr == 0.5
  assert sweep.base.model.normalizer == "softmax"  # base untouched
  args = declaration.main_args(sweep, run, "/w/")
  assert args == [f"--config={path}:demo", "--workdir=/w/normalizer-relu__seed-1",
                  "--config.model.normalizer=relu", "--config.seed=1",
                  "--config.total_steps=7", "--config.lr=0.5"]
  assert declaration.flag_value(False) == "false"
  assert declaration.flag_value(float("inf")) == "inf"
  assert declaration.flag_value((1, 2)) == "(1, 2)"


@pytest.mark.parametrize("sweep_body,extra,match", [
    ('[{"model.normaliser": "relu"}]', [], "unknown config field 'model.normaliser' .did you mean 'normalizer'.*has: normalizer"),
    ('[{"modell.normalizer": "relu"}]', [], "did you mean 'model'"),
    ('[{"model": "x"}]', [], "is a section, not a field"),
    ('[{"seed.x": 1}]', [], "config.seed is a int, not a section"),
    ('[{"nothing": 3}]', [], "is None in the config file"),
    ('[{"seed": "zero"}]', [], "cannot set seed='zero'"),
    ('[{"seed": [1, 2]}]', [], "has type list"),
    ('[{"seed": 1}]', ["totl_steps=3"], "unknown config field 'totl_steps'"),
    ('[{"seed": 1}]', ["total_steps=ten"], "config.total_steps='ten' is not a int"),
    ('[{"seed": 1}]', ["seed=2"], "already varies"),
    ('[{"seed": 1}, {"seed": 1}]', [], "identical runs"),
    ('[]', [], "empty"),
])
def test_bad_overrides_fail_before_anything_runs(tmp_path, sweep_body, extra,
                                                  match):
  path = _write_sweep(tmp_path, f"""
      def get_sweep(arg=None):
        return {sweep_body}
      """)
  with pytest.raises(declaration.SweepError, match=match):
    declaration.load(path, extra=extra)


def test_cli_run_with_a_bad_override_creates_nothing(tmp_path, capsys):
  path = _write_sweep(tmp_path, """
      def get_sweep(arg=None):
        return grid.product(grid.sweep("seed", [0, 1]),
                            grid.sweep("model.normaliser", ["relu"]))
      """)
  workdir = tmp_path / "runs"
  assert cli.main(["run", path, "--workdir", str(workdir)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: override: unknown config field 'model.normaliser'")
  assert len(err.strip().splitlines()) == 1
  assert not workdir.exists()


def test_missing_files_and_missing_sweep(tmp_path):
  with pytest.raises(declaration.SweepError, match="not found"):
    declaration.load(str(tmp_path / "nope.py"))
  path = _write_sweep(tmp_path, "")
  with pytest.raises(declaration.SweepError, match="declares no sweep"):
    declaration.load(path)


def test_launch_prints_one_gcloud_command_per_run(tmp_path, capsys):
  path = _write_sweep(tmp_path, """
      def get_sweep(arg=None):
        return grid.sweep("model.normalizer",
                          ["softmax", "normsoftmax(gamma=sqrt_d)"])
      """)
  assert cli.main(["launch", path + ":x", "--workdir", "gs://b/sw", "--tpu",
                   "v4-32", "--zone", "us-central2-b", "--project", "p",
                   "--env", "TFDS_DATA_DIR=gs://b/tfds", "--print"]) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert lines[0].startswith("# 2 run(s) of")
  cmds = [shlex.split(l) for l in lines[1:]]
  assert len(cmds) == 2
  for argv in cmds:
    assert argv[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "v4-32"]
    assert "--worker=all" in argv and "--zone=us-central2-b" in argv
    assert "--project=p" in argv
  remote = cmds[1][-1]
  assert remote.startswith("--command=cd ~/softattn && ")
  inner = shlex.split(remote[len("--command=cd ~/softattn && "):])
  assert inner == [
      "TFDS_DATA_DIR=gs://b/tfds", "python3", "-m", "softattn.main",
      f"--config={path}:x",  # outside the repo: passed through as given
      "--workdir=gs://b/sw/normalizer-normsoftmax.gamma.sqrt_d",
      "--config.model.normalizer=normsoftmax(gamma=sqrt_d)"]


def test_launch_refuses_to_do_anything_but_print(tmp_path, capsys):
  path = _write_sweep(tmp_path, """
      def get_sweep(arg=None):
        return grid.sweep("seed", [0])
      """)
  argv = ["launch", path, "--workdir", "gs://b", "--tpu", "t", "--zone", "z"]
  assert cli.main(argv) == 2
  assert "add --print" in capsys.readouterr().err
  with pytest.raises(declaration.SweepError, match="repo_dir"):
    launch.tpu_commands(declaration.load(path), tpu="t", zone="z",
                        workdir="gs://b", repo_dir="~/my repo")


def test_launch_uses_repo_relative_config_paths():
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  assert launch.repo_relative(os.path.join(here, "configs", "x.py")) == \
      os.path.join("configs", "x.py")


@pytest.mark.parametrize("spec,runs", [
    ("configs/sweeps/smoke.py", 4),
    ("configs/sweeps/scaling_fmnist.py", 15),
    ("configs/sweeps/scaling_fmnist.py:seeds=2,steps=10", 30),
])
def test_committed_sweep_configs_are_valid(spec, runs, monkeypatch):
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  monkeypatch.chdir(here)
  sweep = declaration.load(spec)
  assert len(sweep.runs) == runs
  for run in sweep.runs:
    for field, value in run.overrides.items():
      node = run.config
      for key in field.split("."):
        node = node[key]
      assert node == value


def test_launch_warns_about_multihost_for_single_host_configs(tmp_path, capsys):
  path = _write_sweep(tmp_path, """
      _base = get_config
      def get_config(arg=None):
        c = _base(arg)
        c.multihost = False
        return c
      def get_sweep(arg=None):
        return grid.sweep("seed", [0, 1])
      """)
  argv = ["launch", path, "--workdir", "gs://b", "--tpu", "t", "--zone", "z",
          "--print"]
  assert cli.main(argv) == 0
  assert "--set multihost=true" in capsys.readouterr().out
  assert cli.main(argv + ["--set", "multihost=true"]) == 0
  out = capsys.readouterr().out
  lines = out.strip().splitlines()
  assert len(lines) == 3 and not lines[1].startswith("#")
  assert all("--config.multihost=true" in l for l in lines[1:])


def test_check_choices_and_image_config():
  from softattn import config_files, configlib  # pylint: disable=g-import-not-at-top
  a = config_files.parse_arg("scale=big", scale="reduced", part="x")
  declaration.check_choices(a, part=("x",))
  with pytest.raises(ValueError, match="use scale=reduced or scale=full"):
    declaration.check_choices(a, part=("x",), scale=declaration.SCALES)
  c = declaration.image_config("fashion_mnist", "flip_lr", "value_range(0, 1)",
                               shuffle_buffer=10, batch_size=64)
  configlib.check_keys(c)
  assert (c.data.name, c.data.train_split, c.data.eval_split, c.data.cache,
          c.data.data_dir, c.batch_size) == ("fashion_mnist", "train", "test",
                                             True, None, 64)
  c.data.data_dir = "../shared/tfds"   # a placeholder: typed, settable
