"""Faults: a bad config is one line, exit code 2, and no workdir.

``softattn.main`` checks a config (``check_config``: ``configlib.resolve_config``
then ``configlib.build_model``) before it creates the workdir, so everything
wrong with a config must be found there. Each row of the table below was
once found later (a traceback with exit code 1 after the workdir,
``config.json``, a TensorBoard file and a ``failed`` status were written),
or not at all (``depth=0`` trained a ViT without blocks).

The rows run in-process through ``parse_command_line`` + ``check_config`` (no
interpreter start per row); a few also run as real ``python -m softattn.main``
processes against a stored dataset, so nothing but the check can stop them.
A last test reads the source: every ``raise ConfigError`` in softattn must be
reachable from ``resolve_config``/``build_model``, so a late one (e.g. in
``train.py``, after the workdir exists) fails here.
"""

import ast
import os
import re
import subprocess
import sys

import pytest

from softattn import config_overrides, configlib
from softattn import main as cli

sys.path.insert(0, os.path.dirname(__file__))
import tiny_data  # pylint: disable=g-import-not-at-top,wrong-import-position
from test_cli import _error_line  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(REPO, "softattn")
QUICK = os.path.join(REPO, "configs", "quickstart.py")
DATASET = "faults_ids"  # 8x8x1 images: quickstart's runlocal ViT (patch 4) fits
# A missing ':' after the def: the file cannot even be compiled.
BAD_SYNTAX = "def get_config(arg=None)\n  return None\n"

# (id, extra argv, regex the one line must match). "{syntax}" is a config file
# with a syntax error, written per test.
BAD = [
    ("batch_size_zero", ["--config.batch_size=0"],
     r"^config\.batch_size=0 is invalid; it must be >= 1: set "
     r"--config\.batch_size to the global batch size"),
    ("batch_size_negative", ["--config.batch_size=-8"],
     r"^config\.batch_size=-8 is invalid; it must be >= 1: set "
     r"--config\.batch_size to the global batch size"),
    ("syntax_error", ["--config={syntax}"],
     r"^config file '.*bad_syntax\.py' has a syntax error at line 1 "
     r"\(expected ':'\); fix it there\.$"),
    ("unknown_pp_train_op", ["--config.data.pp_train=flip_lrr|value_range(-1, 1)"],
     r"^config\.data\.pp_train='flip_lrr\|value_range\(-1, 1\)': unknown "
     r"preprocessing op 'flip_lrr' \(did you mean 'flip_lr'\?\); valid ops: "
     r"central_crop, flip_lr, "),
    ("num_heads_does_not_divide_width", ["--config.model.num_heads=3"],
     r"^config\.model_name='vit' / config\.model: num_heads=3 does not divide "
     r"width=16; set num_heads to a divisor of 16 \(1, 2, 4, 8, 16\)"),
    ("depth_zero", ["--config.model.depth=0"],
     r"^config\.model_name='vit' / config\.model: depth=0 is invalid; it must "
     r"be >= 1 \(a ViT needs an encoder block; .*\): set depth\.$"),
    # Of the same kind: each failed only once training had started.
    ("eval_batch_size_zero", ["--config.eval.batch_size=0"],
     r"^config\.eval\.batch_size=0 is invalid; it must be >= 1"),
    ("total_steps_negative", ["--config.total_steps=-1"],
     r"^config\.total_steps=-1 is invalid; it must be >= 0 \(0: evaluate "
     r"only"),
    ("log_every_negative", ["--config.log_every=-1"],
     r"^config\.log_every=-1 is invalid; it must be >= 0 \(0: never\)"),
    ("eval_every_negative", ["--config.eval_every=-5"],
     r"^config\.eval_every=-5 is invalid; it must be >= 0"),
    ("checkpoint_every_negative", ["--config.checkpoint_every=-1"],
     r"^config\.checkpoint_every=-1 is invalid; it must be >= 0"),
    ("keep_checkpoints_negative", ["--config.keep_checkpoints=-2"],
     r"^config\.keep_checkpoints=-2 is invalid; it must be >= 0"),
    ("pp_eval_bad_arguments", ["--config.data.pp_eval=value_range(-1, 1, 2, 3, 4, 5, 6)"],
     r"^config\.data\.pp_eval='value_range\(-1, 1, 2, 3, 4, 5, 6\)': "
     r"preprocessing op .*signature is value_range\("),
    ("pp_train_bad_value", ["--config.data.pp_train=standardize(0.5, 0)"],
     r"^config\.data\.pp_train='standardize\(0\.5, 0\)': preprocessing op "
     r"'standardize\(0\.5, 0\)': standardize std must be positive"),
    ("num_heads_zero", ["--config.model.num_heads=0"],
     r"num_heads=0 is invalid; it must be >= 1"),
]
# The issue's cases as real processes (each pays ~5-10 s of JAX/TF imports).
SUBPROCESS_ROWS = ["syntax_error", "batch_size_zero", "unknown_pp_train_op",
                   "depth_zero"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("data")
  tiny_data.store_id_dataset(DATASET, str(d), range(32), range(100, 116))
  return str(d)


@pytest.fixture
def syntax_file(tmp_path):
  path = tmp_path / "bad_syntax.py"
  path.write_text(BAD_SYNTAX)
  return str(path)


def _argv(extra, data_dir, workdir, syntax_file):
  extra = [a.replace("{syntax}", syntax_file) for a in extra]
  config = ([] if any(a.startswith("--config=") for a in extra)
            else [f"--config={QUICK}:runlocal"])
  return [*config, f"--workdir={workdir}", f"--config.data.name={DATASET}",
          f"--config.data.data_dir={data_dir}", *extra]


@pytest.mark.parametrize("extra,pattern", [r[1:] for r in BAD],
                         ids=[r[0] for r in BAD])
def test_bad_config_is_one_line_before_the_workdir(extra, pattern, data_dir,
                                                   syntax_file, tmp_path):
  workdir = tmp_path / "wd"
  line = _error_line(_argv(extra, data_dir, workdir, syntax_file))
  assert line is not None, f"{extra} was accepted"
  assert "\n" not in line
  assert re.search(pattern, line.removeprefix("config error: ")), line
  assert not workdir.exists()


def test_the_same_command_line_with_a_good_config_passes(data_dir, syntax_file,
                                                          tmp_path):
  argv = _argv(["--config.model.num_heads=4", "--config.model.depth=2",
                "--config.batch_size=4", "--config.log_every=0",
                "--config.data.pp_train=flip_lr|value_range(-1, 1)"],
               data_dir, tmp_path / "wd", syntax_file)
  command = cli.parse_command_line(["softattn.main", *argv])
  cfg, info = cli.check_config(command.config)
  assert cfg.model.depth == 2 and info["image_shape"] == (8, 8, 1)


def test_every_pp_string_of_the_config_is_parsed(data_dir):
  """Few-shot datasets' and the i1k eval's pp strings too, not only data.*."""
  base = config_overrides.load_with_overrides(f"{QUICK}:runlocal", [])
  with base.unlocked():
    base.data.name, base.data.data_dir = DATASET, data_dir
  configlib.resolve_config(base)
  for where in ("fewshot", "i1k"):
    config = base.copy_and_resolve_references()
    bad = dict(name=DATASET, pp_train="value_range(-1, 1)",
               pp_eval="resize(8)|value_rnage(-1, 1)")
    with config.unlocked():
      if where == "fewshot":
        config.fewshot.datasets = {"fs": bad}
        field = r"config\.fewshot\.datasets\.fs\.pp_eval"
      else:
        config.eval.i1k_data = bad
        field = r"config\.eval\.i1k_data\.pp_eval"
    with pytest.raises(configlib.ConfigError) as e:
      configlib.resolve_config(config)
    assert re.match(field + r"='resize\(8\)\|value_rnage\(-1, 1\)': unknown "
                    r"preprocessing op 'value_rnage' in 'value_rnage\(-1, 1\)' "
                    r"\(did you mean "
                    r"'value_range'\?\)", str(e.value)), str(e.value)


@pytest.mark.parametrize("name,fields,pattern", [
    ("vit", dict(variant="mu/4", pool="cls"), r"unknown pool 'cls'; valid: gap"),
    ("vit", dict(width=30, posemb="sincos2d", num_heads=2),
     r"posemb='sincos2d' needs width divisible by 4"),
    ("vit", dict(variant="mu/4", dropout=1.0), r"dropout=1\.0 is invalid"),
    ("levit_demo", dict(num_heads=3), r"num_heads=3 does not divide width=512"),
    ("levit_demo", dict(depth=0), r"depth=0 is invalid; it must be >= 1"),
    ("preresnet", dict(depth=2), r"PreResNet depth 2 is not 6n\+2 .* n >= 1"),
    ("wrn", dict(depth=4), r"WRN depth 4 is not 6n\+4 with n >= 1"),
    ("resnet", dict(depth=50, stem="tiny"), r"unknown stem 'tiny'"),
    ("preresnet", dict(depth=20, nl_blocks=dict(stage=4)),
     r"nl_blocks\.stage=4 out of range 1\.\.3"),
    ("elementwise", dict(variant="Z"), r"unknown element-wise variant 'Z'"),
])
def test_every_model_checks_its_fields_when_built(name, fields, pattern):
  """Built, not traced: what ``check_config`` runs before the workdir."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  cfg = ml_collections.ConfigDict(dict(model_name=name, model=fields))
  with pytest.raises(configlib.ConfigError, match=(
      rf"^config\.model_name='{name}' / config\.model: {pattern}")) as e:
    configlib.build_model(cfg)
  assert "\n" not in str(e.value)


def test_build_model_checks_the_image_shape_it_is_given(data_dir):
  """A patch that does not divide the images, given the dataset's shape.

  (``softattn.main.check_config`` passes ``image_shape`` once it is changed
  to; until then this fails when ``init`` is traced.)"""
  config = config_overrides.load_with_overrides(
      f"{QUICK}:runlocal", [("model.patch_size", "(3, 3)")])
  with config.unlocked():
    config.data.name, config.data.data_dir = DATASET, data_dir
  cfg, info = configlib.resolve_config(config)
  configlib.build_model(cfg)  # no shape, nothing to check it against
  with pytest.raises(configlib.ConfigError, match=(
      r"^config\.model_name='vit' / config\.model: image size \(8, 8\) is not "
      r"a multiple of the patch size \(3, 3\); resize or pick another patch$")):
    configlib.build_model(cfg, info["image_shape"])


def test_the_issues_cases_exit_2_with_one_line_from_the_real_cli(
    data_dir, syntax_file, tmp_path):
  rows = {r[0]: r for r in BAD}
  # TF's oneDNN banner and jax's TPU probe write to stderr before our line;
  # they are the libraries' (a user's machine may print them too), not ours.
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2",
             TF_ENABLE_ONEDNN_OPTS="0")
  workdirs = {name: tmp_path / f"wd_{name}" for name in SUBPROCESS_ROWS}
  procs = {name: subprocess.Popen(
      [sys.executable, "-m", "softattn.main",
       *_argv(rows[name][1], data_dir, workdirs[name], syntax_file)],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True) for name in SUBPROCESS_ROWS}
  # Every process is waited for before any assertion, so none outlives the test.
  done = {name: (proc, *proc.communicate(timeout=300))
          for name, proc in procs.items()}
  for name, (proc, out, err) in done.items():
    assert proc.returncode == 2, (name, proc.returncode, err[-3000:])
    assert not out.strip(), (name, out[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1, (name, err[-3000:])
    assert lines[0].startswith("config error: "), (name, lines)
    assert re.search(rows[name][2], lines[0].removeprefix("config error: ")), (
        name, lines[0])
    assert not workdirs[name].exists(), name


# ----------------------------------------------------------------------------
# Every ConfigError is raised where softattn.main looks for it: before the
# workdir exists.

ROOTS = ("resolve_config", "build_model")  # what main.check_config calls
# ConfigErrors raised after check_config on purpose, and why no workdir
# comes of them.
LATE_BY_DESIGN = {
    "softattn/config_diff.py:check_resume": (
        "resuming: the workdir exists already and holds checkpoints; the "
        "config is compared with its config.json"),
}


def _name(node) -> str:
  return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _functions(tree):
  """``name -> FunctionDef`` of a module's top-level and nested functions."""
  return {n.name: n for n in ast.walk(tree)
          if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _config_error_names(trees) -> set[str]:
  """``ConfigError`` and every class in softattn derived from it."""
  names, grew = {"ConfigError"}, True
  while grew:
    grew = False
    for tree in trees:
      for n in ast.walk(tree):
        if (isinstance(n, ast.ClassDef) and n.name not in names
            and any(_name(b) in names for b in n.bases)):
          names.add(n.name)
          grew = True
  return names


def _raises(fn, names) -> bool:
  for node in ast.walk(fn):
    if isinstance(node, ast.Raise) and node.exc is not None:
      exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
      if _name(exc) in names:
        return True
  return False


def _calls(fn) -> set[str]:
  """Names ``fn`` calls: ``f(...)`` and ``module.f(...)`` alike."""
  out = set()
  for node in ast.walk(fn):
    if isinstance(node, ast.Call):
      f = node.func
      out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
  return out


def _parse(path):
  with open(path, encoding="utf-8") as f:
    return ast.parse(f.read())


def _call_order(fn) -> list[str]:
  """Dotted names of the calls in ``fn``, in source order."""
  calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
  calls.sort(key=lambda n: (n.lineno, n.col_offset))
  return [ast.unparse(n.func) for n in calls]


def test_every_config_error_is_raised_before_the_workdir_exists():
  trees = {}
  for root, _, names in os.walk(PKG):
    for n in names:
      if n.endswith(".py"):
        path = os.path.join(root, n)
        trees[os.path.relpath(path, REPO)] = _parse(path)
  errors = _config_error_names(trees.values())
  raisers, functions = {}, {}
  for rel, tree in trees.items():
    fns = _functions(tree)
    for name, fn in fns.items():
      if _raises(fn, errors):
        raisers[f"{rel}:{name}"] = name
    if rel in ("softattn/configlib.py", "softattn/config_schema.py"):
      functions.update(fns)
  # Only the config layer raises it: a ConfigError elsewhere (the trainer,
  # the data pipeline) would be raised after the workdir was created.
  late = sorted(k for k in raisers
                if not k.startswith(("softattn/configlib.py:",
                                     "softattn/config_schema.py:"))
                and k not in LATE_BY_DESIGN)
  assert not late, (f"{late} raise ConfigError outside the config layer; "
                    "check it in configlib.resolve_config/build_model instead")
  # ... and only from what softattn.main.check_config runs.
  seen, todo = set(), list(ROOTS)
  while todo:
    name = todo.pop()
    if name in seen or name not in functions:
      continue
    seen.add(name)
    todo.extend(_calls(functions[name]))
  unreachable = sorted(k for k, name in raisers.items()
                       if name not in seen and k not in LATE_BY_DESIGN)
  assert not unreachable, (f"{unreachable} raise ConfigError but are not "
                           f"called from {ROOTS}")
  # check_config runs the roots, and main runs check_config before anything
  # touches the workdir; the trainer resolves before it creates the workdir.
  main_fns = _functions(_parse(os.path.join(PKG, "main.py")))
  assert {"configlib.resolve_config", "configlib.build_model"} <= set(
      _call_order(main_fns["check_config"]))
  order = _call_order(main_fns["main"])
  assert order.index("check_config") < order.index("workdir_check.check_writable")
  assert order.index("check_config") < order.index("train.train_and_evaluate")
  order = _call_order(_functions(_parse(os.path.join(PKG, "train.py")))[
      "train_and_evaluate"])
  assert order.index("configlib.build_model") < order.index("paths.makedirs")
  assert order.index("configlib.resolve_config") < order.index("paths.makedirs")
