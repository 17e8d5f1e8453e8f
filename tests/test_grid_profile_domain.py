"""Profiles over their whole domain: a finite fit or one `ProfileError` line, never NaN and
never a NumPy warning (every warning is an error in this module).

Rows lie in the grid's domains (docs/catalog.md, `sweep fit`): batch sizes as `batch_size`, latencies
as `t_fixed_ms`; a fit's T_fixed and t_req must lie in the `t_fixed_ms` / `t_req_ms` domains
and add up to at least 1 ns. The audit's profile with latencies near 1e308 printed
`T_fixed = nan ms` and wrote NaN to every output; it is now refused at its first row.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweep.cli import main
from sweep.errors import ProfileError
from sweep.grid.profile import BATCH, LATENCY, fit_rows
from sweep.models.dynamic.model import DOMAINS, MIN_T_SVC_MS

pytestmark = pytest.mark.filterwarnings("error")

_batches = st.one_of(
    st.sampled_from([1, 2, int(BATCH.hi) - 1, int(BATCH.hi)]),
    st.floats(0.0, math.log(BATCH.hi)).map(lambda u: int(min(max(round(math.exp(u)), 1), BATCH.hi))),
)
_latencies = st.one_of(
    st.sampled_from([0.0, 5e-324, 1e-300, math.nextafter(LATENCY.hi, 0.0), LATENCY.hi]),
    st.floats(math.log(1e-300), math.log(LATENCY.hi)).map(lambda u: min(math.exp(u), LATENCY.hi)),
)


def _check(fit) -> None:
    values = [fit.t_fixed_ms, fit.t_req_ms, fit.r2, fit.rmse_ms, *fit.row_residuals_ms]
    values += [x for r in fit.residuals for x in (r.mean_latency_ms, r.fitted_ms, r.residual_ms, r.max_abs_residual_ms)]
    assert all(math.isfinite(v) for v in values), fit
    assert DOMAINS["t_fixed_ms"].contains(fit.t_fixed_ms) and DOMAINS["t_req_ms"].contains(fit.t_req_ms)
    assert fit.t_fixed_ms + fit.t_req_ms >= MIN_T_SVC_MS
    assert fit.r2 <= 1.0


@settings(max_examples=300, deadline=None, database=None)
@given(rows=st.lists(st.tuples(_batches, _latencies), min_size=0, max_size=12))
def test_any_rows_in_the_domain_fit_finitely_or_are_refused_in_one_line(rows):
    try:
        fit = fit_rows(rows, source="p.csv")
    except ProfileError as exc:
        msg = str(exc)
        assert msg.startswith("p.csv: ") and "\n" not in msg and "nan" not in msg.lower().split(": ", 2)[1], msg
        return
    _check(fit)


@settings(max_examples=100, deadline=None, database=None)
@given(t_fixed=_latencies, t_req=st.floats(0.0, 10.0), batches=st.lists(_batches, min_size=2, max_size=8, unique=True))
def test_a_line_inside_the_domain_is_recovered(t_fixed, t_req, batches):
    ys = [t_fixed + t_req * b for b in batches]
    if max(ys) > LATENCY.hi or t_fixed + t_req < 2 * MIN_T_SVC_MS:  # clear of the 1 ns rule's edge
        return
    fit = fit_rows(zip(batches, ys), source="p.csv")
    _check(fit)
    scale = max(ys)
    assert fit.t_fixed_ms == pytest.approx(t_fixed, abs=1e-9 * scale)
    assert fit.t_req_ms == pytest.approx(t_req, abs=1e-9 * scale / max(batches))


def test_flat_latencies_fit_exactly_without_0_over_0():
    fit = fit_rows([(1, 0.1), (8, 0.1), (32, 0.1)], source="p.csv")
    assert (fit.t_fixed_ms, fit.t_req_ms, fit.r2) == (0.1, 0.0, 1.0)
    assert fit.row_residuals_ms == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("batches", [(1, 3, 7, 32), (999_999, 1_000_000)])
def test_proportional_latencies_have_a_zero_intercept_not_a_rounding_negative(batches):
    fit = fit_rows([(b, 1e-6 * b) for b in batches], source="p.csv")
    assert fit.t_fixed_ms == 0.0 and fit.t_req_ms == pytest.approx(1e-6)


@pytest.mark.parametrize("rows,where,rule", [
    ([(1, 0.0), (8, 0.0)], "fit t_fixed_ms + t_req_ms", "1 ns"),
    ([(1, 1.7e308), (8, 1.7e308)], "row 1, column latency_ms", "[0, 1e+07] ms"),
    ([(1, 50.0), (8, 1e8)], "row 2, column latency_ms", "[0, 1e+07] ms"),
    ([(1, 50.0), (8, "1e400")], "row 2, column latency_ms", "[0, 1e+07] ms"),
    ([(1, 50.0), (2_000_000, 60.0)], "row 2, column batch_size", "[1, 1e+06]"),
    ([(1, 50.0), (10**400, 60.0)], "row 2, column batch_size", "[1, 1e+06]"),
    ([(1, 50.0), ("1e400", 60.0)], "row 2, column batch_size", "[1, 1e+06]"),
])
def test_out_of_domain_rows_and_empty_fits_are_one_line(rows, where, rule):
    with pytest.raises(ProfileError) as info:
        fit_rows(rows, source="p.csv")
    msg = str(info.value)
    assert msg.startswith(f"p.csv: {where} = ") and rule in msg and "\n" not in msg, msg


@pytest.mark.parametrize("text", [
    "batch_size,latency_ms\n1,1.7976931348623157e308\n8,1.7976931348623157e308\n",
    "batch_size,latency_ms\n1,0\n8,0\n",
    "batch_size,latency_ms\n1,1e7\n1000000,1e7\n",
    "batch_size,latency_ms\n1,5e-324\n1000000,1e7\n",
])
def test_sweep_fit_on_extreme_profiles_prints_numbers_or_one_line(tmp_path, capsys, text):
    path = tmp_path / "p.csv"
    path.write_text(text)
    rc = main(["fit", str(path)])
    out, err = capsys.readouterr()
    assert "nan" not in out.lower() and "inf" not in out.lower(), out
    if rc == 0:
        assert err == "" and "T_fixed = " in out
    else:
        assert rc == 2 and len(err.strip().splitlines()) == 1 and out == "", err


def test_the_example_profile_fits_as_before(root):
    from sweep.grid.profile import fit_file

    fit = fit_file(root / "grids" / "profiles" / "gpt3-a100.csv")
    _check(fit)
    assert np.isfinite(fit.rmse_ms)


# --------------------------------------------------------------------------- sweep calibrate

CAL_HEADER = "model,gpu,tensor_parallel,phase,batch,prompt_tokens,context_tokens,output_tokens,measured_ms,dtype"


@pytest.mark.parametrize("row,where,rule", [
    ("llama-3.1-8b,h100-sxm,5000,decode,8,0,1000,0,5.1,bf16", "tensor_parallel", "integer in [1, 4096]"),
    ("llama-3.1-8b,h100-sxm,1,decode,2000000,0,1000,0,5.1,bf16", "batch", "integer in [1, 1e+06]"),
    ("llama-3.1-8b,h100-sxm,1,decode,8,0,2e8,0,5.1,bf16", "context_tokens", "[0, 1e+08] tokens"),
    ("llama-3.1-8b,h100-sxm,1,prefill,1,1e300,0,0,5.1,bf16", "prompt_tokens", "[0, 1e+08] tokens"),
    ("llama-3.1-8b,h100-sxm,1,generate,8,32,0,2000000,500,bf16", "output_tokens", "integer in [0, 1e+06]"),
    ("llama-3.1-8b,h100-sxm,1,decode,8,0,1000,0,1e-300,bf16", "measured_ms", "[1e-06, 1e+07] ms"),
    ("llama-3.1-8b,h100-sxm,1,decode,8,0,1000,0,1e308,bf16", "measured_ms", "[1e-06, 1e+07] ms"),
])
def test_calibrate_columns_are_bounded(row, where, rule):
    from sweep.grid.calibrate import parse_rows

    with pytest.raises(ProfileError) as info:
        parse_rows(f"{CAL_HEADER}\n{row}\n", "prof.csv")
    msg = str(info.value)
    assert msg.startswith(f"prof.csv: row 2, column {where} = ") and rule in msg and "\n" not in msg, msg


def test_calibrate_at_the_column_bounds_is_finite_and_quiet():
    from sweep.grid.calibrate import calibrate, parse_rows

    rows = parse_rows("\n".join([
        CAL_HEADER,
        "llama-3.1-8b,h100-sxm,1,decode,1000000,0,1e8,0,1e7,fp4/fp4",
        "llama-3.1-8b,h100-sxm,1,prefill,1,100000000,0,0,1e-6,fp32/fp32",
        "llama-3.1-8b,h100-sxm,1,generate,8,100,0,10000,5000,bf16",
        "llama-3.1-70b,h200,4096,decode,1,0,1,0,1e-6,bf16",
        "llama-3.1-70b,h200,4096,prefill,1000000,1,0,0,1e7,bf16",
    ]) + "\n", "prof.csv")
    for fit in calibrate(rows, source="prof.csv"):
        values = [fit.eta_bw, fit.eta_flops, fit.alpha_s, *fit.fitted_ms, *fit.residuals]
        values += [x for x in (fit.eta_bw_se, fit.eta_flops_se, fit.alpha_se) if x is not None]
        assert all(math.isfinite(v) for v in values), fit


def test_the_published_figures_calibrate_without_warnings(root):
    from sweep.grid.calibrate import calibrate, read_rows

    fits = calibrate(read_rows(root / "tests" / "data" / "gpu_measurements.csv"))
    assert fits and all(math.isfinite(r) for f in fits for r in f.residuals)
