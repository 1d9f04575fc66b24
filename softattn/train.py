"""The training loop: ``train_and_evaluate(config, workdir)``.

One code path for a laptop CPU, a GPU and a TPU pod:

* the config is checked first (``configlib.resolve_config``): a typo, an
  unknown normalizer, a batch that does not split over the ``data`` axis or a
  missing dataset is one ``ConfigError`` line naming the fix, before anything
  compiles;
* a ``("data", "model")`` mesh from ``config.mesh``; parameters are initialised
  directly sharded (``jax.jit(init, out_shardings=...)``) by the
  ``config.sharding_rules``; batches are global ``jax.Array``s split over
  ``data``; the step math is ``softattn.steps`` (pure functions), jitted here
  with the shardings and the state donated (``make_steps``);
* Orbax checkpoints every ``checkpoint_every`` steps, at the end and on
  SIGTERM, auto-resumed from ``workdir``. The batch at step ``k`` and the
  dropout/mixup randomness at step ``k`` are pure functions of
  ``(seed, k)``, so a resumed run is bitwise the run that was not interrupted;
* CLU writers: TensorBoard events and ``metrics.jsonl`` in ``workdir``,
  ``ReportProgress`` (steps/s, ETA), a parameter overview at the start, and at
  log steps the attention diagnostics the models sow (score std, entropy,
  gradient saturation) plus per-layer gradient and parameter norms, and at
  eval steps the sink diagnostics per layer and head (``eval/sink/...``, on
  the eval split's first examples; both with ``config.diagnostics``);
* every cadence (log, eval, checkpoint, few-shot) is one ``itstime``;
* a non-finite loss or gradient stops the run with a ``NonFiniteError``
  naming the step and the offending statistics; no checkpoint is written after
  it, so the last good one stays the latest;
* ``status.json`` (``softattn.runstate``): ``running``, ``preempted``
  (SIGTERM or Ctrl-C; rerun to resume), ``done`` or ``failed`` with a kind
  (``nonfinite``, ``config``, ``error``), the step, the message, XLA's FLOP
  count of the train step and the process CPU seconds.

The workdir layout is documented in ``docs/training.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from clu import parameter_overview, periodic_actions

from softattn import (checkpointing, config_diff, configlib, evaluate,
                      init_from as init_from_lib, io_faults,
                      lease as lease_lib, metrics as metrics_lib, optim, paths,
                      runstate, sharding, steps as steps_lib, xla_cost)

evaluate_split = evaluate.evaluate_split


class NonFiniteError(FloatingPointError):
  """The loss or the gradients became NaN/Inf; ``step`` is the step."""

  def __init__(self, message: str, step: int | None = None):
    super().__init__(message)
    self.step = step


def itstime(step: int, every: int | None, total: int, *,
            last: bool = True) -> bool:
  """Whether a periodic action is due after ``step`` (big_vision's ``itstime``).

  Due every ``every`` steps (``every`` 0/None: never periodically) and, with
  ``last``, at ``total``.
  """
  return bool(every and step % every == 0) or (last and step == total)


# ----------------------------------------------------------------------------
# Train state and jitted steps.


@dataclasses.dataclass
class Steps:
  """The jitted functions of one run (built once, used by the loop).

  Each has ``.lower(...)`` for ahead-of-time compilation: ``train`` and
  ``diagnostics`` take ``(state, batch)``; ``eval``/``eval_i1k`` take
  ``(params, batch_stats, batch)``; ``features`` ``(params, batch_stats,
  images)``; ``sinks`` (None without ``config.diagnostics``) ``(params,
  batch_stats, batch)``.
  """
  train: Callable
  diagnostics: Callable
  eval: Callable
  features: Callable
  eval_i1k: Callable | None = None
  sinks: Callable | None = None  # (params, batch_stats, batch); eval steps


def make_steps(cfg, model, tx, schedule, mesh, state_sharding) -> Steps:
  """``softattn.steps`` jitted with the state's and the batch's shardings."""
  s = steps_lib.Settings.from_config(cfg, model, tx, schedule, mesh)
  batch_sh, repl = sharding.batch_sharding(mesh), sharding.replicated(mesh)
  weights_sh = (state_sharding["params"], state_sharding["batch_stats"])

  def eval_fn(class_indices=None):
    return jax.jit(functools.partial(steps_lib.eval_step, s,
                                     class_indices=class_indices),
                   in_shardings=(*weights_sh, batch_sh), out_shardings=repl)

  eval_i1k = None
  if cfg.eval.get("i1k_from_i21k", False):
    eval_i1k = eval_fn(evaluate.default_i1k_indices(
        cfg.eval.get("i21k_wnids_file", None)))
  return Steps(
      train=jax.jit(functools.partial(steps_lib.train_step, s),
                    in_shardings=(state_sharding, batch_sh),
                    out_shardings=(state_sharding, repl), donate_argnums=(0,)),
      diagnostics=jax.jit(functools.partial(steps_lib.diagnostics_step, s),
                          in_shardings=(state_sharding, batch_sh),
                          out_shardings=repl),
      eval=eval_fn(),
      features=jax.jit(functools.partial(steps_lib.features_step, s),
                       in_shardings=(*weights_sh, batch_sh),
                       out_shardings=batch_sh),
      eval_i1k=eval_i1k,
      sinks=jax.jit(functools.partial(steps_lib.sinks_step, s),
                    in_shardings=(*weights_sh, batch_sh), out_shardings=repl)
      if cfg.diagnostics else None)


def init_state(cfg, model, tx, info, mesh, *, abstract: bool = False):
  """``(state, state_sharding)``: the train state created directly sharded.

  ``abstract=True`` returns ``jax.ShapeDtypeStruct``s (with shardings) instead,
  without computing anything: the restore target when resuming, so a resumed
  run never holds two copies of the state.
  """
  h, w, c = info["image_shape"]
  dummy = jnp.zeros((1, h, w, c), jnp.float32)
  ema = bool(cfg.optimizer.get("ema_decay", 0.0))

  def init_fn():
    rng = jax.random.key(int(cfg.seed))
    p_rng, d_rng = jax.random.split(jax.random.fold_in(rng, 2**31 - 1))
    variables = model.init({"params": p_rng, "dropout": d_rng}, dummy,
                           train=False)
    params = variables["params"]
    state = {"step": jnp.zeros((), jnp.int32), "params": params,
             "batch_stats": variables.get("batch_stats", {}),
             "opt_state": tx.init(params)}
    if ema:
      state["ema_params"] = jax.tree.map(jnp.copy, params)
    return state

  shapes = jax.eval_shape(init_fn)
  state_sharding = sharding.tree_shardings(shapes, cfg.sharding_rules, mesh)
  if abstract:
    return jax.tree.map(
        lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
        shapes, state_sharding), state_sharding
  state = jax.jit(init_fn, out_shardings=state_sharding)()
  return state, state_sharding


# ----------------------------------------------------------------------------
# Messages and FLOPs.


def _host(tree):
  return jax.tree.map(np.asarray, jax.device_get(tree))


def _flops(compiled) -> float | None:
  try:
    f = xla_cost.cost_analysis(compiled).get("flops")
    return float(f) if f is not None else None
  except Exception:  # pylint: disable=broad-except
    return None


def _eta(steps_left: int, steps_per_sec: float) -> str:
  secs = int(steps_left / max(steps_per_sec, 1e-9))
  return f"{secs // 3600}h{secs % 3600 // 60:02d}m" if secs >= 3600 else (
      f"{secs // 60}m{secs % 60:02d}s")


def _check_finite(step, m, grad_names, ckpt) -> dict:
  """The step's metrics on the host; ``NonFiniteError`` if they are not finite."""
  m = _host(m)
  if (np.isfinite(m["loss"]) and np.isfinite(m["grad_norm"])
      and int(m["nonfinite_grads"]) == 0):
    return m
  bad = [n for n, ok in zip(grad_names, np.asarray(m["grads_finite"])) if not ok]
  last = ckpt.latest_step()
  where = (f"the last good checkpoint is step {last} in {ckpt.directory} "
           f"(rerunning resumes from it)" if last is not None
           else "no checkpoint was saved before it")
  raise NonFiniteError(
      f"Non-finite training at step {step}: loss={float(m['loss']):.6g}, "
      f"grad_norm={float(m['grad_norm']):.6g}, "
      f"param_norm={float(m['param_norm']):.6g}, "
      f"{int(m['nonfinite_grads'])} non-finite gradient entries in "
      f"{len(bad)}/{len(grad_names)} tensors (first: {bad[:3]}); {where}. "
      f"Lower config.schedule.base_lr, set config.optimizer.grad_clip_norm, "
      f"or use a normalizer that does not diverge.", step=step)


# ----------------------------------------------------------------------------
# The loop.


def train_and_evaluate(config, workdir: str, *,
                       allow_config_change: bool = False) -> dict[str, Any]:
  """Trains and evaluates ``config`` in ``workdir``; returns the final metrics.

  Resumes automatically from the newest checkpoint in ``workdir/checkpoints``
  that restores (a damaged newer one is moved aside, see
  ``softattn.checkpointing``). ``config`` is a raw config (resolved here:
  ``configlib.resolve_config``) or one resolved already (``softattn.main``
  passes it; not looked up again).

  Raises, before anything is written to a workdir that holds another run:
  ``ConfigError`` (before compiling anything) for a bad config;
  ``lease.WorkdirBusy`` when another live run holds ``workdir``;
  ``config_diff.ConfigChanged`` when resuming with a config that differs in
  a field a resume may not change, unless ``allow_config_change``. While
  training: ``NonFiniteError`` when the loss or gradients stop being finite;
  ``io_faults.WorkdirIOError`` when the workdir cannot be written or read
  (after the libraries' retries); ``checkpointing.NoGoodCheckpoint`` when
  checkpoints exist but none restores.
  """
  workdir = os.fspath(paths.path(workdir))  # local folder or gs://
  is_main = jax.process_index() == 0
  cfg, info = configlib.resolve_config(config)
  model = configlib.build_model(cfg, info["image_shape"])
  paths.makedirs(workdir)
  io_faults.quiet_reraised_io_errors()
  # One writer per workdir; taken before anything in it is read or written.
  lease = lease_lib.Lease(workdir).acquire() if is_main else None
  try:
    if _has_checkpoints(workdir):
      changed = config_diff.check_resume(
          workdir, json.loads(cfg.to_json_best_effort()),
          allow_change=allow_config_change)
      if changed:
        logging.warning("Resuming %s with changed fields %s "
                        "(--allow_config_change)", workdir, changed)
    status = runstate.Recorder(workdir, enabled=is_main)
    return _guarded(cfg, info, model, workdir, status, is_main, lease)
  finally:
    if lease is not None:
      lease.release()


def _has_checkpoints(workdir: str) -> bool:
  return any(n.isdigit() for n in paths.listdir(paths.join(workdir,
                                                           "checkpoints")))


def _guarded(cfg, info, model, workdir, status, is_main, lease):
  """``_run`` with each way of ending recorded in ``status.json``."""
  kind = runstate.FailureKind
  if status.prior.state == runstate.State.RUNNING and status.prior.step:
    logging.warning(
        "The previous attempt in %s stopped after step %d without recording "
        "why (killed, or its workdir could not be written); resuming.",
        workdir, status.prior.step)
  try:
    return _run(cfg, info, model, workdir, status, is_main, lease)
  except NonFiniteError as e:
    status.failed(kind.NONFINITE, str(e), e.step)
    raise
  except KeyboardInterrupt:
    # Resumable: a rerun continues from the last checkpoint.
    status.update(state=runstate.State.PREEMPTED, message=(
        f"KeyboardInterrupt after step {status.status.step}; rerun to resume "
        "from the last checkpoint"))
    raise
  except checkpointing.NoGoodCheckpoint as e:
    _record_failure(status, kind.DAMAGED, str(e))
    raise
  except (configlib.ConfigError, lease_lib.WorkdirBusy) as e:
    _record_failure(status, kind.CONFIG, str(e))
    raise
  except Exception as e:
    cause = io_faults.classify(e)
    if cause is None:
      _record_failure(status, kind.ERROR,
                      f"{type(e).__name__}: {configlib.one_line(e)}")
      raise
    step, saved = status.status.step, status.status.saved_step
    where = io_faults.filename(e) or workdir
    message = (f"{where}: {cause} after step {step} ({type(e).__name__}: "
               f"{configlib.one_line(e)[:200]}); "
               + (f"checkpoint {saved} is the newest saved; rerun to resume"
                  if saved is not None else "no checkpoint was saved"))
    # An unreachable workdir would only retry the status write for as long
    # again; the next start says what happened instead.
    if cause != io_faults.UNREACHABLE:
      _record_failure(status, kind.IO, message)
    raise io_faults.WorkdirIOError(message, cause, step) from e


def _record_failure(status, kind, message) -> None:
  """``status.failed`` where it can still be written; never masks the error."""
  try:
    status.failed(kind, message)
  except Exception:  # pylint: disable=broad-except
    # The run's one line says it; the next start reads the status as is.
    logging.info("could not record the failure in status.json: %s", message)


def _start_state(cfg, model, tx, info, mesh, ckpt, writer, say, status):
  """``(state, state_sharding, start step)``: restored, or initialised."""
  if ckpt.latest_step() is not None:
    target, state_sharding = init_state(cfg, model, tx, info, mesh,
                                        abstract=True)
    state, start, damaged = ckpt.restore_newest(target, say)
    if damaged:
      status.update(step=start, saved_step=start, damaged=[
          *status.status.damaged,
          *(f"{d.moved_to or d.step}: {d.reason}" for d in damaged)])
    say(f"Resumed from checkpoint step {start} in {ckpt.directory}")
    return state, state_sharding, start
  state, state_sharding = init_state(cfg, model, tx, info, mesh)
  if cfg.get("init_from") and cfg.init_from.get("path"):
    state, summary = init_from_lib.load_into(
        state, cfg, model, image_size=int(info["image_shape"][0]))
    state = jax.device_put(state, state_sharding)
    say(summary)
    writer.write_texts(0, {"info/init_from": summary})
  num_params = parameter_overview.count_parameters(state["params"])
  overview = parameter_overview.get_parameter_overview(
      state["params"], include_stats=False)
  logging.info("Parameters:\n%s", overview)
  writer.write_scalars(0, {"info/num_params": num_params})
  writer.write_texts(0, {"info/parameter_overview": overview})
  say(f"{cfg.model_name} {dict(cfg.model)}: {num_params:,} parameters; "
      f"mesh {dict(mesh.shape)}; {cfg.total_steps} steps of batch "
      f"{cfg.batch_size}")
  return state, state_sharding, 0


def _run(cfg, info, model, workdir, status, is_main, lease
         ) -> dict[str, Any]:
  from softattn import data as data_lib  # pylint: disable=g-import-not-at-top
  total = cfg.total_steps
  steps_per_epoch = max(int(info.get("num_train", 0) or 0) // cfg.batch_size, 1)
  mesh = sharding.make_mesh(cfg.mesh)
  tx, schedule = optim.make_optimizer(cfg, total, steps_per_epoch)
  if is_main:
    paths.write_json(paths.join(workdir, "config.json"),
                     json.loads(cfg.to_json_best_effort()))
  writer = metrics_lib.make_writer(workdir, is_main=is_main)
  ckpt = checkpointing.Checkpointer(
      paths.join(workdir, "checkpoints"), every=cfg.checkpoint_every,
      keep=cfg.keep_checkpoints, asynchronous=bool(cfg.checkpoint_async),
      is_main=is_main)
  preempt = checkpointing.PreemptionFlag().install()
  verbose = bool(cfg.verbose) and is_main

  def say(msg):
    logging.info(msg)
    if verbose:
      print(msg, flush=True)

  def evaluate_now(state, step):
    out = evaluate.evaluate_all(
        cfg, steps, state, mesh,
        fewshot=itstime(step, cfg.fewshot.get("every", 0), total))
    writer.write_scalars(step, out)
    # Sink diagnostics (per layer and head) go to the logs only.
    out = {k: v for k, v in out.items()
           if not k.startswith(evaluate.SINK_PREFIX)}
    say(f"eval @ {step}: " + ", ".join(
        f"{k[5:]}={v:.4f}" for k, v in out.items() if "num_examples" not in k))
    return {k.replace("/", "_"): float(v) for k, v in out.items()}

  io_cause = None
  try:
    state, state_sharding, start = _start_state(cfg, model, tx, info, mesh,
                                                ckpt, writer, say, status)
    steps = make_steps(cfg, model, tx, schedule, mesh, state_sharding)
    grad_names = [jax.tree_util.keystr(p, simple=True, separator="/")
                  for p, _ in
                  jax.tree_util.tree_flatten_with_path(state["params"])[0]]
    train_iter = data_lib.make_train_iter(
        cfg.data, global_batch_size=cfg.batch_size, seed=int(cfg.seed),
        start_step=start, mesh=mesh)
    report = periodic_actions.ReportProgress(
        num_train_steps=total, writer=None,
        every_steps=max(int(cfg.log_every or 0), 1) if cfg.log_every else None,
        every_secs=None if cfg.log_every else 60.0)
    status.update(state=runstate.State.RUNNING, kind=None, message=None,
                  step=start, saved_step=ckpt.latest_step())

    final: dict[str, Any] = {}
    if start >= total:
      say("total_steps=0: evaluating only." if not total else
          f"Already trained to step {start} >= total_steps {total}; "
          "evaluating.")
      final.update(evaluate_now(state, start))
    pending = None  # (step, metrics) of the previous step, checked one step late
    train_exe = None
    step = start
    t_last, step_last = time.time(), start
    while step < total:
      batch = next(train_iter)
      # Logging off (log_every 0) means off, also at the last step.
      is_log = itstime(step + 1, cfg.log_every, total, last=bool(cfg.log_every))
      diag = steps.diagnostics(state, batch) if is_log and cfg.diagnostics else None
      if train_exe is None:
        # Compile once, explicitly: the executable gives XLA's FLOP count
        # and then runs every step (calling the jit too would compile twice).
        train_exe = steps.train.lower(state, batch).compile()
        if status.status.flops_per_step is None:
          status.update(flops_per_step=_flops(train_exe))
      state, m = train_exe(state, batch)
      step += 1
      # Check the previous step while this one runs (keeps dispatch async).
      if pending is not None:
        _check_finite(*pending, grad_names, ckpt)
      pending = (step, m)
      report(step)
      is_ckpt = itstime(step, cfg.checkpoint_every, total) or preempt.is_set()
      is_eval = itstime(step, cfg.eval_every, total)
      if not (is_log or is_ckpt or is_eval):
        continue
      mh = _check_finite(*pending, grad_names, ckpt)
      pending = None
      if is_log:
        now = time.time()
        sps = (step - step_last) / max(now - t_last, 1e-9)
        t_last, step_last = now, step
        final.update(_log_train(writer, step, mh, diag, sps, cfg, say))
      if is_ckpt:
        ckpt.save(step, state)
      if is_eval:
        final.update(evaluate_now(state, step))
        t_last = time.time()  # steps/s measures training, not evaluation
      status.update(step=step, saved_step=ckpt.committed)
      writer.flush()
      if lease is not None:
        lease.check()
      if preempt.is_set():
        # The notice may have come after this step's save was decided (during
        # its log line, eval or flush): save now unless saved, and report
        # only a step whose save is complete.
        ckpt.save(step, state)
        saved = ckpt.saved_step()
        say(f"SIGTERM: saved checkpoint {saved}; rerun the same command to "
            "resume.")
        status.update(state=runstate.State.PREEMPTED, step=saved,
                      saved_step=saved, message=(
                          f"SIGTERM: checkpoint saved at step {saved}; rerun "
                          "to resume"))
        ckpt.close()
        return final
    ckpt.close()
    final["step"] = step
    status.update(state=runstate.State.DONE, step=step, final=final,
                  saved_step=ckpt.committed)
    say("final: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else
                              f"{k}={v}" for k, v in final.items()))
    return final
  except BaseException as e:
    io_cause = io_faults.classify(e)
    raise
  finally:
    preempt.uninstall()
    if io_cause is None:
      writer.flush()
      writer.close()
      try:
        ckpt.close()
      except Exception:  # pylint: disable=broad-except
        pass
    elif io_cause != io_faults.UNREACHABLE:
      # A local fault (a full disk): close the logs, whose last writes fail
      # again, so that nothing is left for Python to flush (and report) at
      # exit. An unreachable bucket is left alone: every flush would wait
      # out the retries again.
      try:
        writer.close()
      except Exception:  # pylint: disable=broad-except
        pass


def _log_train(writer, step, mh, diag, sps, cfg, say) -> dict[str, float]:
  """Writes a log step's scalars, prints its line; returns train loss/acc."""
  scalars = {f"train/{k}": v for k, v in mh.items() if k != "grads_finite"}
  scalars["train/steps_per_sec"] = sps
  scalars["train/images_per_sec"] = sps * cfg.batch_size
  if diag is not None:
    scalars.update({f"train/{k}": v for k, v in _host(diag).items()})
  writer.write_scalars(step, scalars)
  say(f"step {step}/{cfg.total_steps}  loss {float(mh['loss']):.4f}  "
      f"acc {float(mh['accuracy']):.3f}  lr {float(mh['learning_rate']):.3g}  "
      f"grad_norm {float(mh['grad_norm']):.3g}  {sps:.2f} steps/s  "
      f"ETA {_eta(cfg.total_steps - step, sps)}")
  return {f"train_{k}": float(mh[k]) for k in ("loss", "accuracy")}
