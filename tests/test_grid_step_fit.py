"""Step-time fits for continuous serving (`sweep.grid.step_fit`, `sweep.grid.fit`, `sweep fit`,
`[profile]` in a continuous grid).

References:
- step rows: ordinary least squares is exact on noise-free rows, and on noisy rows its
  classical standard errors match the spread of the estimates over repeated draws (a Monte
  Carlo here, 400 fits: the estimates' standard deviation within 15% of the reported
  standard error, and about 95% of the ±2 SE intervals cover the truth);
- request rows: a closed-loop benchmark simulated here step by step with SPEC 10's scheduler
  rules (`closed_loop`: c clients, each sends its next request when one finishes; whole
  prompts in one step; output lengths uniform in [O/2, 3O/2]); the fit recovers the
  coefficients that generated it;
- the packaged profile grids/profiles/llama-3.1-8b-h100-nim.csv holds NVIDIA's published
  NIM 1.8 figures (cited in the file).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.dataset as ds
import pytest

from sweep import grid as spec
from sweep.cli import main
from sweep.errors import GridError, ProfileError
from sweep.grid.fit import fit_text
from sweep.grid.step_fit import closed_loop_steps, fit_requests, fit_steps
from sweep.runner import run_grid

TRUE = (6.0, 0.03, 4e-5)  # t_fixed, t_token, t_ctx (ms): a 7-8B model on one H100, roughly


def step_ms(n_tok, n_ctx, c=TRUE):
    return c[0] + c[1] * np.asarray(n_tok, float) + c[2] * np.asarray(n_ctx, float)


def closed_loop(c: int, prompt: int, output: int, coef=TRUE, *, steps=3000, warmup=1000, seed=0) -> tuple[float, float]:
    """Mean TTFT and mean TPOT (ms) of a closed-loop benchmark at concurrency c (cap >= c,
    budget >= prompt), by SPEC 10's rules: a step carries one decode token per running
    sequence and whole prompts of new ones; n_ctx counts prompts plus tokens emitted before
    the step; a finished request's client sends the next at the step's end, in time for the
    next step."""
    rng = np.random.default_rng(seed)

    def new(t):
        return {"o": int(rng.integers(output // 2, 3 * output // 2 + 1)), "k": 0, "arrival": t, "first": None}

    seqs = [new(None) for _ in range(c)]
    t, ttft, tpot = 0.0, [], []
    for step in range(steps):
        n_tok = sum(prompt if s["k"] == 0 else 1 for s in seqs)
        n_ctx = sum(prompt + s["k"] for s in seqs)
        t += coef[0] + coef[1] * n_tok + coef[2] * n_ctx
        nxt = []
        for s in seqs:
            if s["k"] == 0:
                s["first"] = t
                if s["arrival"] is not None and step >= warmup:
                    ttft.append(t - s["arrival"])
            s["k"] += 1
            if s["k"] >= s["o"]:
                if s["arrival"] is not None and step >= warmup:
                    tpot.append((t - s["first"]) / (s["o"] - 1))
                nxt.append(new(t))
            else:
                nxt.append(s)
        seqs = nxt
    return float(np.mean(ttft)), float(np.mean(tpot))


CASES = [(1, 200, 200), (8, 200, 200), (32, 200, 200), (64, 200, 200), (1, 2000, 200), (8, 2000, 200),
         (32, 2000, 200), (64, 500, 50)]


@pytest.fixture(scope="module")
def benchmark_rows():
    return [(c, p, o, *closed_loop(c, p, o)) for c, p, o in CASES]


def test_closed_loop_means_are_the_step_times_the_fit_assumes(benchmark_rows):
    """The fit's model of a benchmark (`closed_loop_steps`) against the simulation: both
    means within 2% (the module docstring's claim)."""
    a = np.asarray(benchmark_rows)
    s = closed_loop_steps(a[:, 0], a[:, 1], a[:, 2])
    np.testing.assert_allclose(step_ms(s["ttft_tok"], s["ttft_ctx"]), a[:, 3], rtol=0.02)
    np.testing.assert_allclose(step_ms(s["tpot_tok"], s["tpot_ctx"]), a[:, 4], rtol=0.02)
    # at concurrency 1 there is no one else: exact (TTFT one prefill step; TPOT the decode steps)
    one = a[a[:, 0] == 1]
    np.testing.assert_allclose(step_ms(s["ttft_tok"], s["ttft_ctx"])[a[:, 0] == 1], one[:, 3], rtol=1e-12)


def test_request_rows_recover_the_coefficients(benchmark_rows):
    fit = fit_requests(benchmark_rows)
    assert fit.shape == "request" and fit.n == 16 and fit.rows == 8 and fit.pinned == ()
    assert fit.t_fixed_ms == pytest.approx(TRUE[0], rel=0.02)
    assert fit.t_token_ms == pytest.approx(TRUE[1], rel=0.02)
    assert fit.t_ctx_ms == pytest.approx(TRUE[2], rel=0.10)
    assert all(se > 0 for se in fit.se_ms) and fit.r2 > 0.999


def test_step_rows_exact_without_noise():
    rng = np.random.default_rng(1)
    n_tok = rng.integers(1, 8192, 40)
    n_ctx = rng.integers(0, 400_000, 40)
    fit = fit_steps(list(zip(n_tok, n_ctx, step_ms(n_tok, n_ctx))))
    np.testing.assert_allclose(fit.coefficients, TRUE, rtol=1e-9)
    assert fit.r2 == pytest.approx(1.0) and max(abs(r) for r in fit.residuals_ms) < 1e-9
    assert fit.as_dict()["t_token_ms"] == fit.t_token_ms and json.dumps(fit.as_dict())


def test_step_rows_standard_errors_match_the_spread_of_repeated_fits():
    rng = np.random.default_rng(2)
    n_tok = rng.integers(1, 4096, 60).astype(float)
    n_ctx = rng.integers(0, 200_000, 60).astype(float)
    clean = step_ms(n_tok, n_ctx)
    est, ses = [], []
    for _ in range(400):
        y = clean + rng.normal(0.0, 0.5, len(clean))
        f = fit_steps(list(zip(n_tok, n_ctx, y)))
        est.append(f.coefficients)
        ses.append(f.se_ms)
    est, ses = np.asarray(est), np.asarray(ses)
    np.testing.assert_allclose(est.std(axis=0, ddof=1), ses.mean(axis=0), rtol=0.15)
    cover = (np.abs(est - np.asarray(TRUE)) <= 2 * ses).mean(axis=0)
    assert (cover > 0.90).all() and (cover < 0.99).all(), cover


def test_a_coefficient_below_zero_is_pinned_and_the_rest_refitted():
    """No context cost in the truth, noise pushes the unconstrained t_ctx below 0 in about
    half the draws: pinned at 0, and the pinned fit is ordinary least squares on the rest."""
    rng = np.random.default_rng(3)
    n_tok = rng.integers(1, 4096, 30).astype(float)
    n_ctx = rng.integers(0, 1000, 30).astype(float)
    for _ in range(20):
        y = 5.0 + 0.02 * n_tok + rng.normal(0, 0.5, 30)
        f = fit_steps(list(zip(n_tok, n_ctx, y)))
        if f.pinned:
            break
    assert f.pinned == ("t_ctx_ms",) and f.t_ctx_ms == 0.0 and f.pinned_z["t_ctx_ms"] < 0
    x = np.column_stack([np.ones(30), n_tok])
    want = np.linalg.lstsq(x, y, rcond=None)[0]
    np.testing.assert_allclose([f.t_fixed_ms, f.t_token_ms], want, rtol=1e-9)


def test_nim_profile_fits_and_says_where_the_line_bends(root, capsys):
    path = root / "grids" / "profiles" / "llama-3.1-8b-h100-nim.csv"
    assert main(["fit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "6 equations" in out and "standard error" in out and "pinned at 0" in out and "bend away" in out
    f = fit_text(path.read_text(), str(path), "step")
    # NIM's TPOT rises 2.94 ms from concurrency 1 to 100 while the closed loop adds ~99 prompt
    # tokens a step: the cached-token term has nothing left to explain (pinned)
    assert f.pinned == ("t_ctx_ms",) and 3.0 < f.t_fixed_ms < 5.0 and 0.01 < f.t_token_ms < 0.03


BAD = [
    ("n_tokens,step_ms\n1,2\n", "row 1 (header)", "must name column 'n_ctx' (a step profile"),
    ("batch_size,latency_ms\n1,10\n8,20\n", "row 1 (header)", "is a service profile"),
    ("n_tokens,n_ctx,step_ms\n1,10,5\n2,10,6\n3,30,7\n", "rows = 3", "at least 4"),
    ("n_tokens,n_ctx,step_ms\n1,10,5\n2,20,6\n3,30,7\n4,40,8\n", "rows = 4", "do not determine"),
    ("n_tokens,n_ctx,step_ms\n1,10,5\n2.5,20,6\n", "row 3, column n_tokens", "must be an integer"),
    ("n_tokens,n_ctx,step_ms\n1,10,-5\n", "row 2, column step_ms", "must be a finite number in [0, 1e+07] ms"),
    ("n_tokens,n_ctx,step_ms\n1,10,nan\n", "row 2, column step_ms", "NaN is not a measurement"),
    ("n_tokens,n_ctx,step_ms\n1,,5\n", "row 2, column n_ctx", "is missing"),
    ("n_tokens,n_ctx,step_ms\n", "rows = 0", "no rows"),
    ("", "row 1 (header)", "the file is empty"),
    ("concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms\n1,200,200,,\n", "row 2", "both blank"),
    ("concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms\n1,200,1,10,4\n", "row 2, column tpot_ms", "no TPOT"),
    ("concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms\n0,200,200,10,4\n", "row 2, column concurrency",
     "integer in [1, 100000]"),
    ("concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms\n1,200,200,,4\n5,200,200,,5\n25,200,200,,6\n50,200,200,,7\n",
     "rows = 4", "TTFT and TPOT"),
    ("n_tokens,n_ctx,step_ms\n1,0,5000000\n2,0,10000000\n3,1,10000000\n4,0,10000000\n",
     "fit t_token_ms", "must lie in"),
]


@pytest.mark.parametrize("text, where, rule", BAD, ids=[b[2][:24] for b in BAD])
def test_bad_profiles_are_one_line_naming_file_row_and_rule(tmp_path, capsys, text, where, rule):
    with pytest.raises(ProfileError) as err:
        fit_text(text, "p.csv", "step")
    msg = str(err.value)
    assert msg.startswith("p.csv: ") and where in msg and rule in msg and "\n" not in msg
    path = tmp_path / "p.csv"
    path.write_text(text)
    if "service profile" not in rule:  # sweep fit accepts every shape
        assert main(["fit", str(path)]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


GRID = """
name = "fitted"
[grid]
model = "llama-3.1-8b"
gpu = "h100-sxm"
arrival_rps = [5.0, 20.0]
prompt_tokens = 1000
output_tokens = 200
batch_size = [32, 128]
ttft_slo_ms = 2000
tpot_slo_ms = 50
{extra}
[options]
serving = "continuous"
[profile]
file = "{profile}"
[output]
points = "all"
"""


def test_continuous_grid_takes_its_step_times_from_a_profile(tmp_path, root):
    nim = root / "grids" / "profiles" / "llama-3.1-8b-h100-nim.csv"
    p = tmp_path / "g.toml"
    p.write_text(GRID.format(extra="", profile=nim))
    with pytest.raises(GridError, match="outside the grid file's folder"):
        spec.load(p)
    g = spec.load(p, allow_outside=[nim.parent])  # the profile stays where it is, its folder allowed
    fit = fit_text(nim.read_text(), str(nim), "step")
    assert g.service_source == "fitted" and g.fit["shape"] == "request" and g.fit["t_token_ms_se"] > 0
    run_grid(g, tmp_path / "o")
    pts = ds.dataset(tmp_path / "o" / "points", partitioning="hive").to_table().to_pandas()
    assert (pts.service_source == "fitted").all()
    assert (pts.t_step_fixed_ms == fit.t_fixed_ms).all() and (pts.t_token_ms == fit.t_token_ms).all()
    assert (pts.t_ctx_ms == fit.t_ctx_ms).all()
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["service_fit"]["t_fixed_ms"] == fit.t_fixed_ms and manifest["service_fit"]["pinned"] == ["t_ctx_ms"]


@pytest.mark.parametrize("extra, profile, where, rule", [
    ("t_fixed_ms = 5.0", "NIM", "grid.t_fixed_ms", "[profile] gives the service times"),
    ("eta_bw = 0.7", "NIM", "grid.eta_bw", "[profile] gives the service times"),
    ("", "SERVICE", "row 6 (header)", "is a service profile"),
])
def test_profile_conflicts_and_shapes_in_a_continuous_grid(tmp_path, root, capsys, extra, profile, where, rule):
    path = {"NIM": root / "grids" / "profiles" / "llama-3.1-8b-h100-nim.csv",
            "SERVICE": root / "grids" / "profiles" / "gpt3-a100.csv"}[profile]
    p = tmp_path / "g.toml"
    p.write_text(GRID.format(extra=extra, profile=path))
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--allow-outside", str(path.parent)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert where in line and rule in line and not (tmp_path / "o").exists()


def test_a_dynamic_grid_refuses_a_step_profile(tmp_path, root, capsys):
    nim = root / "grids" / "profiles" / "llama-3.1-8b-h100-nim.csv"
    text = (root / "grids" / "seed-gpt3-profile.toml").read_text()
    start = text.index("file =")
    end = text.index("\n", start)
    p = tmp_path / "g.toml"
    shutil.copy(nim, tmp_path)  # beside the grid
    p.write_text(text[:start] + f'file = "{nim.name}"' + text[end:])
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "request profile, which fits continuous serving" in line and "batch_size,latency_ms" in line
    assert not (tmp_path / "o").exists()


def test_step_covariance_diagonal_is_the_standard_errors_and_matches_the_spread():
    # Reference: the spread of 400 refits on fresh noise (the covariance the fit reports
    # should be the covariance of the estimates across repeated measurements).
    rng = np.random.default_rng(4)
    n_tok = rng.integers(1, 4096, 60).astype(float)
    n_ctx = rng.integers(0, 200_000, 60).astype(float)
    clean = step_ms(n_tok, n_ctx)
    fits = [fit_steps(list(zip(n_tok, n_ctx, clean + rng.normal(0.0, 0.5, len(clean))))) for _ in range(400)]
    cov = np.asarray(fits[0].cov_ms2)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), fits[0].se_ms, rtol=1e-9)
    np.testing.assert_allclose(cov, cov.T, rtol=1e-12)
    emp = np.cov(np.asarray([f.coefficients for f in fits]).T)
    mean_cov = np.mean([np.asarray(f.cov_ms2) for f in fits], axis=0)
    corr = lambda c: c / np.sqrt(np.outer(np.diag(c), np.diag(c)))  # noqa: E731
    np.testing.assert_allclose(corr(mean_cov), corr(emp), atol=0.15)
    assert json.dumps(fits[0].as_dict())
