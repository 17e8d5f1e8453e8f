"""Profile fitting (SPEC 1, source 2): the least-squares line, its rules, and `[profile]` in grids."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sweep import grid as spec
from sweep.cli import main
from sweep.errors import GridError, ProfileError
from sweep.grid.profile import fit_file, fit_rows, parse_profile


def test_exact_line_is_recovered():
    rows = [(b, 50.0 + 0.5 * b) for b in (1, 8, 32)]
    fit = fit_rows(rows)
    assert fit.t_fixed_ms == pytest.approx(50.0, abs=1e-12)
    assert fit.t_req_ms == pytest.approx(0.5, abs=1e-12)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.n == 3 and [r.batch_size for r in fit.residuals] == [1, 8, 32]
    assert max(abs(r) for r in fit.row_residuals_ms) < 1e-9


def test_matches_numpy_polyfit_with_repeats_and_noise():
    rng = np.random.default_rng(0)
    b = np.repeat([1, 2, 4, 8, 16, 32, 64], 5)
    y = 12.0 + 0.37 * b + rng.normal(0, 0.3, b.size)
    fit = fit_rows(zip(b.tolist(), y.tolist()))
    slope, intercept = np.polyfit(b, y, 1)
    assert fit.t_req_ms == pytest.approx(slope, rel=1e-10)
    assert fit.t_fixed_ms == pytest.approx(intercept, rel=1e-10)
    r = y - (intercept + slope * b)
    assert fit.r2 == pytest.approx(1 - np.sum(r**2) / np.sum((y - y.mean()) ** 2), rel=1e-12)
    assert np.allclose(fit.row_residuals_ms, r)
    # per-batch residual is the mean of that batch's row residuals; they sum to zero overall
    for res in fit.residuals:
        assert res.n == 5 and res.residual_ms == pytest.approx(r[b == res.batch_size].mean(), abs=1e-12)
    assert sum(res.residual_ms * res.n for res in fit.residuals) == pytest.approx(0.0, abs=1e-9)


def test_example_profile_is_near_the_seed_line(root):
    fit = fit_file(root / "grids" / "profiles" / "gpt3-a100.csv")
    assert fit.t_fixed_ms == pytest.approx(50.0, abs=0.5)
    assert fit.t_req_ms == pytest.approx(0.5, abs=0.02)
    assert fit.r2 > 0.999 and fit.n == 9


@pytest.mark.parametrize(
    "rows, where, rule",
    [
        ([(8, 54.0), (8, 54.2)], "column batch_size", "at least two distinct batch sizes"),
        ([], "column batch_size", "at least two distinct batch sizes"),
        ([(1, 50.0), (8, -1.0)], "row 2, column latency_ms", "in [0, 1e+07] ms"),
        ([(1, 50.0), (8, float("nan"))], "row 2, column latency_ms", "NaN"),
        ([(1, 50.0), (8, float("inf"))], "row 2, column latency_ms", "finite"),
        ([(1, 50.0), (8, None)], "row 2, column latency_ms", "missing"),
        ([(1, 50.0), (8, "")], "row 2, column latency_ms", "missing"),
        ([(1.5, 50.0), (8, 54.0)], "row 1, column batch_size", "integer in [1, 1e+06]"),
        ([(0, 50.0), (8, 54.0)], "row 1, column batch_size", "integer in [1, 1e+06]"),
        ([("x", 50.0), (8, 54.0)], "row 1, column batch_size", "integer in [1, 1e+06]"),
        ([(1, 60.0), (8, 50.0)], "fit t_req_ms", "slope is negative"),
        ([(8, 10.0), (32, 60.0)], "fit t_fixed_ms", "intercept is negative"),
    ],
)
def test_rejections_are_one_line_naming_where_and_rule(rows, where, rule):
    with pytest.raises(ProfileError) as e:
        fit_rows(rows, source="p.csv")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"p.csv: {where} = ") and rule in msg


def test_csv_parsing_rules():
    text = textwrap.dedent("""\
        # a comment
        latency_ms, batch_size, p99_ms

        50.5, 1, 60
        # another
        54.0, 8, 70
        """)
    rows, lines = parse_profile(text, "p.csv")
    assert rows == [("1", "50.5"), ("8", "54.0")] and lines == [4, 6]
    with pytest.raises(ProfileError, match=r"p.csv: row 1 \(header\) = .*'latency_ms'"):
        parse_profile("batch_size,latency\n1,2\n", "p.csv")
    with pytest.raises(ProfileError, match=r"p\.csv: row 3 = .*has 1 cells"):
        parse_profile("batch_size,latency_ms\n1,2\n8\n", "p.csv")
    with pytest.raises(ProfileError, match="empty"):
        parse_profile("# nothing\n", "p.csv")
    # line numbers of the file name the bad cell
    rows, lines = parse_profile("batch_size,latency_ms\n# c\n1,50\n8,oops\n", "p.csv")
    with pytest.raises(ProfileError, match=r"p.csv: row 4, column latency_ms = 'oops'"):
        fit_rows(rows, source="p.csv", row_numbers=lines)


def test_missing_file_is_a_profile_error(tmp_path):
    with pytest.raises(ProfileError, match="cannot be read"):
        fit_file(tmp_path / "nope.csv")


# --------------------------------------------------------------------------- [profile] in grids

GRID = """
name = "p"
{profile}
[grid]
arrival_rps = 100.0
batch_size = [8, 16]
seq_len = 2048
model = "gpt3-175b"
gpu = "a100-80gb"
gpus_per_replica = 8
slo_ms = 200.0
{extra}
"""


def _grid(tmp_path: Path, profile: str = '[profile]\nfile = "prof.csv"', extra: str = "") -> Path:
    (tmp_path / "prof.csv").write_text("batch_size,latency_ms\n1,50.5\n8,54\n32,66\n")
    p = tmp_path / "g.toml"
    p.write_text(GRID.format(profile=profile, extra=extra))
    return p


def test_profile_grid_is_fitted(tmp_path):
    g = spec.load(_grid(tmp_path))
    assert g.service_source == "fitted"
    fit = fit_file(tmp_path / "prof.csv")
    assert g.axis("t_fixed_ms").values == (fit.t_fixed_ms,)
    assert g.axis("t_req_ms").values == (fit.t_req_ms,)
    assert g.fit is not None and g.fit["r2"] == pytest.approx(fit.r2) and g.fit["n"] == 3


@pytest.mark.parametrize("extra", ["t_fixed_ms = 50.0\nt_req_ms = 0.5", "t_fixed_ms = 50.0", "eta_bw = 0.7"])
def test_profile_and_numbers_are_exclusive(tmp_path, extra):
    with pytest.raises(GridError, match=r"\[profile\] gives the service times"):
        spec.load(_grid(tmp_path, extra=extra))


@pytest.mark.parametrize(
    "profile, match",
    [
        ('[profile]\nfile = 3', "profile.file = 3"),
        ('[profile]\nfile = "prof.csv"\nweights = 1', "profile.weights"),
        ('profile = "prof.csv"', "must be a table"),
    ],
)
def test_bad_profile_table(tmp_path, profile, match):
    with pytest.raises(GridError, match=match):
        spec.load(_grid(tmp_path, profile=profile))


def test_seed_profile_grid_runs_and_records_the_fit(tmp_path, root):
    out = tmp_path / "out"
    assert main(["run", str(root / "grids" / "seed-gpt3-profile.toml"), "--out", str(out), "--quiet"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["service_source"] == "fitted"
    fit = m["service_fit"]
    assert math.isclose(fit["t_fixed_ms"], 50.0, abs_tol=0.5) and fit["r2"] > 0.999
    import pyarrow.dataset as ds

    t = ds.dataset(out / "points").to_table()
    assert set(t.column("service_source").to_pylist()) == {"fitted"}
    assert np.allclose(t.column("t_fixed_ms").to_numpy(), fit["t_fixed_ms"])


def test_bad_profile_through_run_exits_2_and_writes_nothing(tmp_path, capsys):
    g = _grid(tmp_path)
    (tmp_path / "prof.csv").write_text("batch_size,latency_ms\n1,50\n1,51\n")
    out = tmp_path / "out"
    assert main(["run", str(g), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prof.csv" in err and "two distinct batch sizes" in err
    assert not out.exists()


def test_coefficient_covariance_is_the_classical_ols_one():
    # Reference: numpy.polyfit(cov="unscaled") gives (X'X)^-1 (slope, intercept order);
    # the classical OLS covariance is sigma^2 (X'X)^-1 with sigma^2 = SS_res / (n - 2).
    rng = np.random.default_rng(3)
    b = np.repeat([1, 2, 4, 8, 16, 32], 4)
    y = 10.0 + 0.5 * b + rng.normal(0, 0.2, b.size)
    fit = fit_rows(zip(b.tolist(), y.tolist()))
    (slope, intercept), unscaled = np.polyfit(b, y, 1, cov="unscaled")
    s2 = np.sum((y - intercept - slope * b) ** 2) / (b.size - 2)
    ref = s2 * unscaled[::-1, ::-1]  # -> (intercept, slope) order
    np.testing.assert_allclose(np.asarray(fit.cov_ms2), ref, rtol=1e-9)
    assert fit.se_ms == pytest.approx((math.sqrt(ref[0, 0]), math.sqrt(ref[1, 1])), rel=1e-9)
    assert json.dumps(fit.as_dict())
    # two rows: no residual degree of freedom, no covariance
    assert fit_rows([(1, 10.0), (2, 11.0)]).cov_ms2 is None
