"""The seed's model (SPEC 1-6): the window proxy with its tail rules, B_min, Little's law,
KV memory and the operating rules, against the seed's table and closed forms.

Sources of the reference values:
- the seed's worked example table (GPT-3, 100 rps, T_svc = 50 + 0.5 B ms), to its printed
  precision (half a unit of the last printed digit);
- closed forms (Pollaczek-Khinchine, Takacs, the full-batch delay variance);
- binary-exact inputs where a boundary must land exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _points import dynamic
from hypothesis import given, settings
from hypothesis import strategies as st

from sweep.decide.verdict import ACTION_CODE, ACTIONS

SEED_B = [1, 4, 8, 16, 32]
# Seed table, "批大小对 GPT-3 服务性能的影响": T_svc ms, req/s, rho %, E[W] ms, (B-1)/(2 lambda) ms, E[T] ms
SEED_TABLE = [
    (50.5, 19.8, 505, math.inf, 0.0, math.inf),
    (52.0, 76.9, 130, math.inf, 15.0, math.inf),
    (54.0, 148.1, 67.5, 56.1, 35.0, 145.1),
    (58.0, 275.9, 36.3, 16.5, 75.0, 149.5),
    (66.0, 484.8, 20.6, 8.6, 155.0, 229.6),
]


def _printed(x: float, printed: float, decimals: int) -> bool:
    """x rounds to the seed's printed value (half a unit of its last digit, plus fp slack)."""
    if math.isinf(printed):
        return math.isinf(x) and x > 0
    return abs(x - printed) <= 0.5 * 10.0**-decimals + 1e-9


def _decimals(v: float) -> int:
    return 0 if float(v).is_integer() and abs(v) >= 100 else 1


def test_seed_table_reproduced_to_printed_precision():
    r = dynamic(windowed=False, batch_size=np.array(SEED_B, dtype=float))
    for i, (t_svc, rps, rho_pct, ew, batch, et) in enumerate(SEED_TABLE):
        assert _printed(r["t_svc_ms"][i], t_svc, 1)
        assert _printed(r["capacity_rps"][i], rps, 1)
        assert _printed(r["rho"][i] * 100, rho_pct, _decimals(rho_pct))
        assert _printed(r["e_wait_ms"][i], ew, 1)
        assert _printed(r["e_batch_ms"][i], batch, 1)
        assert _printed(r["e_resp_ms"][i], et, 1)
    # B = 1 and 4 are unstable (505 %, 130 %): both verdicts false, waits +inf, no NaN.
    assert not r["stable"][:2].any() and not r["proxy_ok"][:2].any()
    assert r["stable"][2:].all() and r["proxy_ok"][2:].all()
    assert all(np.isfinite(v).all() or np.isinf(v).any() for v in r.values())
    assert not any(np.isnan(np.asarray(v, dtype=float)).any() for v in r.values())


def test_seed_b_min_and_littles_law():
    r = dynamic(windowed=False, batch_size=16.0)
    # Seed eq. 2: 100 x 0.05 / (0.75 - 100 x 0.0005) = 5 / 0.70 = 7.14 -> 8.
    assert round(float(r["b_min_rho_target"][0]), 2) == 7.14
    assert r["b_min_rho_target_int"][0] == 8
    # Seed step 2: B_min = T_fixed lambda / (1 - t_req lambda) = 5 / 0.95 = 5.26 -> 6 strictly stable.
    assert r["b_min_stable"][0] == pytest.approx(5 / 0.95, rel=1e-15)
    assert r["b_min_stable_int"][0] == 6
    # Napkin Math 0.1 at B = 16: 100 x 0.1495 = 14.95 in system, 16 x 0.363 = 5.8 in service.
    assert _printed(r["little_l"][0], 14.95, 2)
    assert _printed(r["in_service"][0], 5.8, 1)
    # The seed subtracts its rounded 16 x 0.363 = 5.808 from 14.95 (9.14); exact is 9.149.
    assert abs(r["in_queue"][0] - 9.14) < 0.01
    assert r["in_queue"][0] == pytest.approx(r["little_l"][0] - 100 * 0.058, rel=1e-12)


def test_seed_kv_memory():
    # Seed eq. 3: 2 x 96 x 12288 x 2048 x 2 B = 9.66 GB; 640 - 350 = 290 GB free; 290 / 9.66 -> 30.
    r = dynamic(windowed=False, batch_size=np.array([30.0, 31.0]))
    assert round(float(r["kv_gb_per_req"][0]), 2) == 9.66
    assert r["free_gb"][0] == pytest.approx(290.0, rel=1e-15)
    assert (r["b_mem_max"] == 30).all()
    assert r["mem_ok"].tolist() == [True, False]
    assert r["action"][1] == ACTION_CODE["out_of_memory"]


def test_integer_b_min_agrees_with_stability_at_exact_boundaries():
    # Binary-exact inputs: lambda = 64, T_fixed = 3/32 s, t_req = 1/256 s. Then
    # B_min(1) = 6 / 0.75 = 8 exactly and B = 8 has rho = 1 (not stable) -> 9; and
    # B_min(0.75) = 6 / 0.5 = 12 exactly, where rho = 0.75 meets the target -> 12.
    exact = dict(arrival_rps=64.0, t_fixed_ms=1e3 * 3 / 32, t_req_ms=1e3 / 256, rho_target=0.75)
    r = dynamic(windowed=False, batch_size=np.array([8.0, 9.0, 12.0]), **exact)
    assert r["b_min_stable"][0] == 8.0 and r["b_min_stable_int"][0] == 9
    assert r["stable"][:2].tolist() == [False, True]
    assert r["b_min_rho_target"][0] == 12.0 and r["b_min_rho_target_int"][0] == 12
    assert r["rho"][2] == 0.75
    # Infeasible target: rho_target <= lambda t_req -> +inf, and the integer too.
    inf = dynamic(windowed=False, arrival_rps=100.0, t_req_ms=8.0, rho_target=0.75)
    assert np.isinf(inf["b_min_rho_target"][0]) and np.isinf(inf["b_min_rho_target_int"][0])


# --------------------------------------------------------------------------- tails


def test_tail_estimates():
    r = dynamic(windowed=False, batch_size=16.0, percentile=0.99)
    et, sd = r["e_resp_ms"][0] / 1e3, r["sd_resp_ms"][0] / 1e3
    assert r["p_gauss_ms"][0] / 1e3 == pytest.approx(et + 2.3263478740408408 * sd, rel=1e-14)  # Phi^-1(0.99)
    assert r["p_exp_ms"][0] / 1e3 == pytest.approx(-math.log(0.01) * et, rel=1e-14)  # 4.605 E[T]
    # Full batches: Var T_svc = 0, Var T_batch = (B-1)(B+7)/(12 lambda^2), Var W by Takacs.
    lam, s, b = 100.0, 0.058, 16.0
    lam_b, rho = lam / b, lam * s / b
    ew = lam_b * s * s / (2 * (1 - rho))
    var_w = ew**2 + lam_b * s**3 / (3 * (1 - rho))
    var_tb = (b - 1) * (b + 7) / (12 * lam * lam)
    assert sd == pytest.approx(math.sqrt(var_w + var_tb), rel=1e-13)
    # A low percentile stays finite and below the mean for the gaussian rule.
    lo = dynamic(windowed=False, batch_size=16.0, percentile=0.2)
    assert lo["p_gauss_ms"][0] < lo["e_resp_ms"][0]


def test_unstable_points_are_data_not_nan():
    r = dynamic(windowed=True, full=True, batch_size=np.array([1.0, 4.0, 1.0, 4.0]),
                batch_window_ms=np.array([math.inf, math.inf, 10.0, 10.0]), percentile=0.3)
    for k, v in r.items():
        assert not np.isnan(np.asarray(v, dtype=float)).any(), k
    assert np.isinf(r["e_resp_ms"]).all() and np.isinf(r["p_gauss_ms"]).all() and np.isinf(r["in_queue"]).all()
    assert (r["action"] == ACTION_CODE["unstable"]).all()


def test_windowed_proxy_can_fail_while_batcher_is_stable():
    # SPEC 3: B_max = 24 at 100 rps is stable (full batches keep up), but a 1 ms window
    # makes batches of ~1.1, whose proxy rho is > 1: two different verdicts.
    r = dynamic(windowed=True, full=False, batch_size=24.0, batch_window_ms=1.0)
    assert r["stable"][0] and not r["proxy_ok"][0]
    assert np.isinf(r["latency_ms"][0]) and r["action"][0] == ACTION_CODE["slo_violated"]


def test_service_noise_raises_the_wait():
    quiet = dynamic(windowed=False, batch_size=16.0, service_cv=0.0)
    noisy = dynamic(windowed=False, batch_size=16.0, service_cv=0.5)
    assert noisy["e_wait_ms"][0] == pytest.approx(quiet["e_wait_ms"][0] * 1.25, rel=1e-13)  # E[S^2] x (1 + cv^2)
    assert noisy["sd_resp_ms"][0] > quiet["sd_resp_ms"][0]


def test_paged_allocation_and_actions():
    r = dynamic(windowed=False, paged=True, mean_seq_len=1000.0, batch_size=16.0)
    assert r["kv_gb_per_req"][0] == pytest.approx(4718592.0 * 1008 * 1e-9, rel=1e-15)  # ceil(1000 / 16) x 16 tokens
    assert r["kv_waste_frac"][0] == pytest.approx(1 - 1000 / 1008, rel=1e-15)
    contiguous = dynamic(windowed=False, paged=False, mean_seq_len=1000.0, batch_size=16.0)
    assert contiguous["kv_waste_frac"][0] == pytest.approx(1 - 1000 / 2048, rel=1e-15)
    heavy = dynamic(windowed=False, n_params=350e9, batch_size=8.0)
    assert not heavy["weights_fit"][0] and heavy["b_mem_max"][0] == 0
    # Table 1 in order, on the seed example: 8 -> ok (rho 0.675), 16 -> overprovisioned, 32 -> OOM.
    seed = dynamic(windowed=False, batch_size=np.array([8.0, 16.0, 32.0]), slo_ms=1000.0)
    codes = [ACTIONS[c] for c in seed["action"]]
    assert codes == ["ok", "overprovisioned", "out_of_memory"]
    near = dynamic(windowed=False, batch_size=8.0, rho_max=0.6, slo_ms=1000.0)
    assert ACTIONS[near["action"][0]] == "near_saturation"
    slow = dynamic(windowed=False, batch_size=8.0, slo_ms=100.0)
    assert ACTIONS[slow["action"][0]] == "slo_violated"


# --------------------------------------------------------------------------- properties

_lams = st.floats(1e-3, 1e6)
_bs = st.integers(1, 4096)
_windows = st.floats(0.0, 10.0)


@settings(max_examples=60, deadline=None)
@given(lam=_lams, b=_bs, t=_windows, tf=st.floats(0.0, 0.5), tr=st.floats(1e-7, 0.05))
def test_properties_windowed(lam, b, t, tf, tr):
    lams = np.array([lam, lam * 1.5, lam * 3.0])
    r = dynamic(windowed=True, full=False, arrival_rps=lams, batch_size=float(b), batch_window_ms=t * 1e3,
                t_fixed_ms=tf * 1e3, t_req_ms=tr * 1e3)
    for k, v in r.items():
        assert not np.isnan(np.asarray(v, dtype=float)).any(), k
    assert ((r["mean_batch"] >= 1 - 1e-12) & (r["mean_batch"] <= b * (1 + 1e-12))).all()
    assert (r["proxy_ok"] == np.isfinite(r["e_wait_ms"])).all()
    assert (r["proxy_ok"] == np.isfinite(r["e_resp_ms"])).all()
    assert (r["e_batch_ms"] >= 0).all() and (r["e_batch_ms"] <= t * 1e3 * (1 + 1e-9)).all()
    ew = r["e_wait_ms"]
    finite = ew[np.isfinite(ew)]  # once infinite, it stays infinite at higher load
    assert np.isfinite(ew).tolist() == sorted(np.isfinite(ew).tolist(), reverse=True)
    assert (np.diff(finite) >= -1e-12 * finite[:-1]).all()
    assert (r["rho"][r["proxy_ok"]] < 1).all()


@settings(max_examples=40, deadline=None)
@given(lam=_lams, b=_bs, tf=st.floats(0.0, 0.5), tr=st.floats(1e-7, 0.05))
def test_properties_full_batch(lam, b, tf, tr):
    lams = np.array([lam, lam * 1.5, lam * 3.0])
    r = dynamic(windowed=False, arrival_rps=lams, batch_size=float(b), t_fixed_ms=tf * 1e3, t_req_ms=tr * 1e3)
    for k, v in r.items():
        assert not np.isnan(np.asarray(v, dtype=float)).any(), k
    assert (r["proxy_ok"] == r["stable"]).all()  # SPEC 3: the same verdict for full batches
    assert (r["proxy_ok"] == np.isfinite(r["e_wait_ms"])).all()
    ew = r["e_wait_ms"]
    finite = np.isfinite(ew)
    assert (np.diff(ew[finite]) >= 0).all()
    assert ((r["in_service"] < b) | ~r["stable"]).all()  # stable: lambda T_svc(B) < B
