"""The sinks study's per-run numbers: the sink diagnostics summarised per
run (``summarize``, by claims.py's thresholds), and the transfer probe run
when exporting runs.csv (``transfer``): every finished run evaluated at the
other token counts with ``configs/transfer.py``.

Why a probe and not a sweep part: ``configs/transfer.py:from=<run>`` reads
the source run's ``config.json`` when it is loaded, and a sweep resolves
every run's config before any runs, so a part over it cannot be declared
before its sources exist; a part that spells the source out per run as
``init_from.path`` puts the workdir's path into every run name (names list
every field that varies), and a sweep's declaration cannot know the
``WORKDIR`` it will run in. The export knows each run's folder: it runs
the documented command (``python -m softattn.main
--config=configs/transfer.py:from=<run>,size=S``, evaluation only) into
``<workdir>/transfer/<part>/<run>/size-<S>``, skips those already done,
and records the results on the source run (``value/n<tokens>/...``), where
they pair with its own accuracy by seed.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys

from softattn import paths, runstate
from softattn.sweep import rundir
import softattn_studies as studies

HERE = os.path.dirname(os.path.abspath(__file__))
claims = studies.load_module(os.path.join(HERE, "claims.py"))
TRANSFER = os.path.normpath(os.path.join(HERE, "..", "..", "configs",
                                         "transfer.py"))
PARALLEL = 2          # transfer evaluations at once (the 2 CPU cores)


def summarize(stats: dict[str, float]) -> dict[str, float]:
  """claims.py's per-run values (``sink_heads``, ``has_sink``, ...) from
  one eval's sink diagnostics ``{"<layer>/h<j>/<stat>": v,
  "<block>/token_norm_max": v, ...}`` (``summarize_sinks``'s keys); {}
  without them."""
  heads, blocks = {}, {}
  for key, v in stats.items():
    path, _, stat = key.rpartition("/")
    group = heads if re.search(r"/h\d+$", path) else blocks
    group.setdefault(path, {})[stat] = v
  if not heads:
    return {}
  sinks = [h for h in heads.values()
           if h["top_key_share"] > claims.SINK_SHARE]
  noop = [h for h in sinks if h["top_key_vnorm_ratio"] < claims.NOOP_VNORM]
  broad = [h for h in sinks if h["out_erank"] < claims.BROADCAST_ERANK]
  on_token = [h for h in broad if h.get("top_key_register", 0.0) < 0.5]
  ratio = max((b["token_norm_max"] / b["token_norm_median"]
               for b in blocks.values() if b.get("token_norm_median")),
              default=None)
  out = {"sink_heads": len(sinks) / len(heads), "has_sink": float(bool(sinks)),
         "noop_heads": len(noop) / len(heads), "has_noop": float(bool(noop)),
         "broadcast_token_heads": len(on_token) / len(heads),
         "has_broadcast": float(bool(broad))}
  if ratio is not None:
    # The deepest block: its path's numbers compared as numbers.
    last = blocks[max(blocks, key=lambda k: [
        int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k)])]
    out.update(norm_ratio=ratio, has_high_norm=float(
        ratio >= claims.HIGH_NORM), top_norm_patch=last.get(
            "token_norm_max_patch"))
  return {k: v for k, v in out.items() if v is not None}


def _summary(metrics, prefix: str) -> dict[str, float]:
  """``summarize`` of the sink diagnostics under ``prefix`` in ``metrics``."""
  return summarize({k[len(prefix):]: v for k, v in metrics.items()
                    if k.startswith(prefix)})


# ``Study.values``: one function per summary value of the run's own eval.
VALUES = {name: (lambda run, name=name: _summary(run.metrics,
                                                 "final/sink/").get(name))
          for name in ("sink_heads", "has_sink", "noop_heads", "has_noop",
                       "broadcast_token_heads", "has_broadcast",
                       "norm_ratio", "has_high_norm", "top_norm_patch")}


def transfer_dir(run, size: int) -> str:
  """``<workdir>/transfer/<part>/<run>/size-<size>``: beside the parts."""
  workdir = os.path.dirname(os.path.dirname(run.dir))
  return paths.join(workdir, "transfer", run.part, run.name, f"size-{size}")


def _done(path: str) -> bool:
  status = runstate.read(path)
  return status is not None and runstate.State(status.state) == \
      runstate.State.DONE


def _evaluate(src: str, size: int, out: str) -> None:
  """``configs/transfer.py:from=src,size=size`` (evaluation only) into
  ``out``; its output goes to ``out/transfer.log``."""
  paths.makedirs(out)
  cmd = [sys.executable, "-m", "softattn.main",
         f"--config={TRANSFER}:from={os.path.abspath(src)},size={size}",
         f"--workdir={out}"]
  with open(os.path.join(out, "transfer.log"), "a", encoding="utf-8") as log:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)


def transfer(runs, cache_dir: str) -> None:
  """``Study.probe``: evaluates every finished run at its scale's
  ``TRANSFER_SIZES`` (those not done yet, ``PARALLEL`` at a time), then
  records on each run, per token count n, ``value/n<n>/accuracy``,
  ``value/n<n>/drop`` (minus the run's own accuracy), the ``summarize``
  values there and the evaluation's ``core_seconds``."""
  del cache_dir
  todo = [(r, s) for r in runs if r.done and r.dir for s in
          claims.study.TRANSFER_SIZES["reduced" if r.config.data.name ==
                                      "fashion_mnist" else "full"]]
  with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
    jobs = [pool.submit(_evaluate, r.dir, s, transfer_dir(r, s))
            for r, s in todo if not _done(transfer_dir(r, s))]
    for i, job in enumerate(concurrent.futures.as_completed(jobs), 1):
      job.result()
      print(f"transfer: {i}/{len(jobs)} evaluated", flush=True)
  for r, s in todo:
    path = transfer_dir(r, s)
    evals = [x for x in rundir.read_metrics(path) if x.get("split") == "eval"]
    if not (_done(path) and evals):
      print(f"transfer: {path} did not finish (see its transfer.log)")
      continue
    last, own = evals[-1], r.value("final/accuracy")
    got = {"accuracy": last["accuracy"], **_summary(last, "sink/")}
    if own is not None:
      got["drop"] = last["accuracy"] - own
    got["core_seconds"] = runstate.read(path).core_seconds
    ph, pw = r.config.model.patch_size   # patch tokens at s px
    n = (s // ph) * (s // pw)
    r.metrics.update({f"value/n{n}/{k}": float(v) for k, v in got.items()})
