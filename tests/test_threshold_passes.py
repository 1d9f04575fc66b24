"""The fused threshold search's passes (``pallas/common/streams.py``): the
bracket it starts from, and which kernels one call runs. That the fused
sparsemax/entmax15 equal dense is ``tests/test_pallas.py``'s; how many passes
rows take is ``benchmarks/threshold_passes.py``'s."""

import collections

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import normalizers as N
from softattn import pallas
from softattn.pallas.common import streams as fused
from softattn.streams import _power


def _f(z, tau, pw):
  """``f(tau) = sum_j [z_j - tau]_+^p - 1`` per row, float64."""
  return np.sum(np.maximum(z - tau, 0.0) ** pw, -1, keepdims=True) - 1.0


@pytest.mark.parametrize("alpha", [2.0, 1.5])
def test_bracket_and_start_are_left_of_the_root(alpha):
  """``f(lo) >= 0 >= f(hi)``, and the start (a Newton step from the best
  candidate) is left of the root and within the candidates' spacing of it:
  Newton from there increases to the root, never past it."""
  a1, pw = alpha - 1.0, 1.0 / (alpha - 1.0)
  rng = np.random.default_rng(0)
  z = a1 * np.concatenate([s * rng.standard_normal((8, 300))
                           for s in (0.3, 1.0, 5.0, 30.0)])
  n = np.full((z.shape[0], 1), z.shape[1], np.float64)
  with jax.enable_x64(True):
    lo, hi = fused.bracket(z.max(-1, keepdims=True), z.sum(-1, keepdims=True),
                           n, a1)
    taus = fused.candidates(lo, hi)
    x = np.maximum(z[:, None, :] - np.asarray(taus)[..., None], 0.0)
    start = fused.start(taus, jnp.asarray((x ** pw).sum(-1)),
                        jnp.asarray(np.asarray(_power(jnp.asarray(x), pw - 1)
                                               ).sum(-1)), pw)
  lo, hi, start = map(np.asarray, (lo, hi, start))
  assert np.all(_f(z, lo, pw) >= 0) and np.all(_f(z, hi, pw) <= 1e-12)
  assert np.all(hi - lo <= 1.0 + 1e-12)
  assert np.all(_f(z, start, pw) >= -1e-9)            # left of the root
  # within one spacing of the root: f falls below 0 one spacing later
  assert np.all(_f(z, start + (hi - lo) / fused.EDGES + 1e-9, pw) <= 0)


def _kernel_names(fn, *args):
  names = collections.Counter()

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "pallas_call":
        info = eqn.params.get("name") or eqn.params.get("name_and_src_info")
        names[str(info).split()[0]] += 1
      for sub in jex_core.jaxprs_in_params(eqn.params):
        walk(sub)

  walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return names


def test_a_fused_call_runs_one_pass_per_newton_step():
  """Forward: the statistics pass, the bracket pass, one pass in the Newton
  loop's body (``S0`` and ``S1`` together), then the differentiable step's
  two pointwise passes and the weighted one."""
  norm = N.get("sparsemax")
  q = jnp.ones((1, 24, 2, 8), jnp.float32)
  # interpret=True: one lowering of each kernel (None traces both, Mosaic's
  # and the interpreter's, under platform_dependent).
  names = _kernel_names(lambda q: pallas.pallas_attention(
      q, q, q, norm, norm.resolve(None, head_dim=8), None, 0.3, False,
      chunk_size=16, interpret=True), q)
  assert names == {"softattn_threshold_stats": 1,
                   "softattn_threshold_edges": 2, "softattn_forward": 3}, names
