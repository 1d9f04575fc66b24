"""Every bad command line is one line naming the fix, exit code 2, nothing compiled.

(``softattn.main``; ``softattn.aot`` reads ``--config`` with the same code.)

One table of bad inputs. Each row runs in-process through the same
``parse_command_line`` + ``check_config`` that ``softattn.main`` runs before
training (fast: no interpreter start per row); a few rows also run as real
``python -m softattn.main`` subprocesses, which checks the exit code and that
stderr ends with exactly that line and holds no traceback.
"""

import os
import re
import subprocess
import sys

import jax
import pytest
import tensorflow_datasets as tfds

from softattn import main as cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = os.path.join(REPO, "configs", "quickstart.py")
I21K = os.path.join(REPO, "configs", "i21k_vit.py")
WD = "--workdir=/nonexistent/softattn-cli-test"  # never created

# (id, argv after the program name, regex the one line must match)
BAD_INPUTS = [
    ("unknown_field", [f"--config={QUICK}:runlocal", WD, "--config.model.dropout=0.1"],
     r"^unknown config field 'model\.dropout'; config\.model has: depth, .*width\.$"),
    ("unknown_top_field", [f"--config={QUICK}", WD, "--config.totl_steps=5"],
     r"^unknown config field 'totl_steps' \(did you mean 'total_steps'\?\); config has: "),
    ("field_of_a_field", [f"--config={QUICK}", WD, "--config.seed.x=1"],
     r"^unknown config field 'seed\.x': config\.seed is a int, not a section\.$"),
    ("section_not_field", [f"--config={QUICK}", WD, "--config.model=vit"],
     r"^config\.model is a section, not a field; set its fields"),
    ("unknown_arg", [f"--config={QUICK}:normalizr=softmax", WD],
     r"quickstart\.py:normalizr=softmax: unknown arg 'normalizr' \(did you mean "
     r"'normalizer'\?\); valid: normalizer, steps, batch, width, depth, runlocal\.$"),
    ("bad_int_field", [f"--config={QUICK}", WD, "--config.total_steps=abc"],
     r"^config\.total_steps='abc' is not a int; e\.g\. --config\.total_steps=100\.$"),
    ("float_for_int", [f"--config={QUICK}", WD, "--config.batch_size=1.5"],
     r"^config\.batch_size='1\.5' is not a int"),
    ("bad_bool_field", [f"--config={QUICK}", WD, "--config.verbose=maybe"],
     r"^config\.verbose='maybe' is not a bool; e\.g\. --config\.verbose=true\.$"),
    ("bad_float_field", [f"--config={QUICK}", WD, "--config.schedule.base_lr=fast"],
     r"^config\.schedule\.base_lr='fast' is not a float"),
    ("bad_int_arg", [f"--config={QUICK}:steps=ten", WD],
     r"arg steps='ten' must be a int, e\.g\. steps=300\.$"),
    ("bad_bool_arg", [f"--config={QUICK}:runlocal=maybe", WD],
     r"arg runlocal='maybe' must be true or false\.$"),
    ("nsm_negative_gamma", [f"--config={QUICK}:runlocal,normalizer=normsoftmax(gamma=-1)", WD],
     r"^config\.model\.normalizer='normsoftmax\(gamma=-1\)': normsoftmax: gamma=-1 "
     r"is invalid; it must be in \(0, inf\]\.$"),
    ("relu_alpha_2", [f"--config={QUICK}:runlocal", WD,
                      "--config.model.normalizer=relu_seqlen(alpha=2)"],
     r"relu_seqlen: alpha=2 is invalid; it must be in \[0, 1\]"),
    ("negative_eps", [f"--config={QUICK}:runlocal", WD,
                      "--config.model.normalizer=normsoftmax(eps=-1e-6)"],
     r"normsoftmax: eps=-1e-06 is invalid; it must be in \[0, inf\)"),
    ("unknown_act", [f"--config={QUICK}:runlocal", WD,
                     "--config.model.normalizer=relu_seqlen(act=gelux)"],
     r"act='gelux' is invalid; it must be one of relu, relu2, gelu, gelu_exact"),
    ("unknown_normalizer", [f"--config={QUICK}:runlocal,normalizer=sofmax", WD],
     r"unknown normalizer 'sofmax'; valid names: (\w+, )+softmax, "),
    ("unparsable_normalizer", [f"--config={QUICK}:runlocal", WD,
                               "--config.model.normalizer=normsoftmax(gamma="],
     r"cannot parse normalizer spec"),
    ("unknown_variant", [f"--config={I21K}:runlocal", WD, "--config.model.variant=Q/16"],
     r"^config\.model_name='vit' / config\.model: unknown ViT variant 'Q' in "
     r"'Q/16'; valid: mu, Ti, S"),
    ("unknown_model", [f"--config={QUICK}:runlocal", WD, "--config.model_name=vitt"],
     r"unknown model 'vitt'; valid names: "),
    ("unknown_optimizer", [f"--config={QUICK}:runlocal", WD, "--config.optimizer.name=adamm"],
     r"Unknown optimizer 'adamm'; set config\.optimizer\.name to one of"),
    ("missing_file", ["--config=configs/nope.py", WD],
     r"^config file 'configs/nope\.py' not found; config files in configs/: "
     r"cifar10_vit\.py, .*quickstart\.py, transfer\.py\.$"),
    ("missing_config_flag", [WD],
     r"^--config is required, e\.g\. --config=configs/quickstart\.py:runlocal\.$"),
    ("missing_workdir", [f"--config={QUICK}:runlocal"], r"^--workdir is required"),
    ("unknown_flag", [f"--config={QUICK}:runlocal", WD, "--wrkdir=/tmp/x"],
     r"^Unknown command line flag 'wrkdir'.*; see --helpfull\.$"),
    ("stray_argument", [f"--config={QUICK}:runlocal", WD, "total_steps=3"],
     r"^unexpected arguments \['total_steps=3'\]"),
]
# A few rows as real processes (each pays ~5-10 s of JAX/TF imports).
SUBPROCESS_ROWS = ["unknown_field", "unknown_arg", "nsm_negative_gamma",
                   "missing_file"]

_COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, *a, **k: _COMPILES.append(event)
    if "backend_compile" in event else None)


def _error_line(argv):
  """The line ``softattn.main`` would print, or None if the input is fine."""
  try:
    command = cli.parse_command_line(["softattn.main", *argv])
    cli.check_config(command.config)
  except cli.UsageError as e:
    return f"config error: {e}"
  return None


@pytest.mark.parametrize("argv,pattern", [r[1:] for r in BAD_INPUTS],
                         ids=[r[0] for r in BAD_INPUTS])
def test_bad_input_is_one_line_naming_the_fix(argv, pattern, monkeypatch):
  monkeypatch.chdir(REPO)  # relative config paths, as a user types them
  before = len(_COMPILES)
  with tfds.testing.mock_data(num_examples=4):
    line = _error_line(argv)
  assert line is not None, f"{argv} was accepted"
  assert "\n" not in line
  message = line.removeprefix("config error: ")
  assert re.search(pattern, message), message
  assert len(_COMPILES) == before  # nothing was compiled


def test_a_good_command_line_passes_the_same_checks(monkeypatch):
  monkeypatch.chdir(REPO)
  argv = [f"--config={QUICK}:runlocal,normalizer=relu_seqlen(alpha=0.5, act=gelu_exact)",
          WD, "--config.total_steps=5", "--config.model.patch_size=(7, 7)",
          "--config.verbose=false", "--noconfig.checkpoint_async"]
  with tfds.testing.mock_data(num_examples=4):
    command = cli.parse_command_line(["softattn.main", *argv])
    cfg, _ = cli.check_config(command.config)
  assert cfg.total_steps == 5 and cfg.model.patch_size == (7, 7)
  assert cfg.verbose is False and cfg.checkpoint_async is False
  assert command.workdir == WD.split("=", 1)[1]
  before = len(_COMPILES)
  jax.jit(lambda x: x * 3.0)(2.0)
  assert len(_COMPILES) > before  # the listener does see compilations


def test_bad_inputs_exit_2_with_one_line_from_the_real_cli(tmp_path):
  rows = {r[0]: r for r in BAD_INPUTS}
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
  # The AOT command line reads --config the same way (softattn.configlib).
  aot = subprocess.Popen(
      [sys.executable, "-m", "softattn.aot", f"--config={I21K}",
       "--topology=v5e-1", "--config.model.variant=S/16",
       "--config.totl_steps=5"], cwd=REPO, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  procs = {name: subprocess.Popen(
      [sys.executable, "-m", "softattn.main", *rows[name][1]], cwd=REPO,
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for name in SUBPROCESS_ROWS}
  for name, proc in procs.items():
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, (name, err[-2000:])
    assert "Traceback" not in err and not out.strip(), (name, err[-2000:])
    last = err.strip().splitlines()[-1]
    assert last.startswith("config error: "), (name, err[-2000:])
    assert re.search(rows[name][2], last.removeprefix("config error: ")), last
  assert not os.path.exists(WD.split("=", 1)[1])
  out, err = aot.communicate(timeout=300)
  assert aot.returncode == 2 and "Traceback" not in err, err[-2000:]
  assert re.search(rows["unknown_top_field"][2],
                   err.strip().splitlines()[-1].removeprefix("error: ")), err
