"""Grid files (SPEC 8): shapes, defaults, and every rejection rule.

A rejection is one line naming the file, the key, the value and the rule; through the CLI it
exits with code 2 and writes nothing.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from sweep import grid as spec
from sweep.cli import main
from sweep.errors import GridError

BASE = {
    "arrival_rps": "100.0",
    "batch_size": "[1, 4, 8, 16, 32]",
    "seq_len": "2048",
    "model": '"gpt3-175b"',
    "gpu": '"a100-80gb"',
    "gpus_per_replica": "8",
    "t_fixed_ms": "50.0",
    "t_req_ms": "0.5",
    "slo_ms": "200.0",
}


def grid_text(extra_top: str = "", drop: tuple[str, ...] = (), tables: str = "", **over: str) -> str:
    keys = {k: v for k, v in BASE.items() if k not in drop}
    keys.update(over)
    body = "\n".join(f"{k} = {v}" for k, v in keys.items())
    return f'name = "t"\n{extra_top}\n[grid]\n{body}\n{textwrap.dedent(tables)}'


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "g.toml"
    p.write_text(text)
    return p


def load_text(tmp_path: Path, text: str) -> spec.GridSpec:
    return spec.load(write(tmp_path, text))


def test_seed_grid_loads(root):
    g = spec.load(root / "grids" / "seed-gpt3.toml")
    assert g.n_points == 5
    assert g.axis("batch_size").values == (1, 4, 8, 16, 32)
    static = g.model.static(g)
    assert g.service_source == "given" and not static["windowed"] and static["full"]
    assert ([a.key for a in g.axes[-3:]] == ["replicas", *g.model.row_axes]
            == ["replicas", "batch_window_ms", "batch_size"])


def test_example_grid_loads(root):
    g = spec.load(root / "grids" / "example.toml")
    # 3 rates x 3 replicas x 7 batch sizes x 3 windows x 2 models x 2 GPUs x 3 GPU counts
    assert g.n_points == 3 * 3 * 7 * 3 * 2 * 2 * 3 == 2268
    assert g.service_source == "roofline" and g.options.kv_allocation == "paged"
    assert [m.name for m in g.models] == ["llama-3.1-8b", "my-70b"]
    gpus = {x.name: x for x in g.gpus}
    assert gpus["h100-sxm"].usd_per_gpu_hour == 2.10  # the inline override of one field
    assert gpus["my-gpu"].hbm_bytes == 80e9


def test_scalars_lists_and_ranges(tmp_path):
    g = load_text(tmp_path, grid_text(
        batch_size="{start = 1, stop = 64, num = 7, scale = \"log\"}",
        arrival_rps="{start = 50, stop = 150, step = 50}",
        batch_window_ms="[5, 20, inf]",
        slo_ms="{start = 100.0, stop = 200.0, num = 3}",
    ))
    assert g.axis("batch_size").values == (1, 2, 4, 8, 16, 32, 64)
    assert g.axis("arrival_rps").values == (50.0, 100.0, 150.0)
    assert g.axis("batch_window_ms").values == (5.0, 20.0, math.inf)
    assert g.axis("slo_ms").values == (100.0, 150.0, 200.0)
    assert g.n_points == 7 * 3 * 3 * 3
    assert g.model.static(g)["windowed"] and g.model.static(g)["full"]


def test_integer_accepted_for_float_and_dtype_names(tmp_path):
    g = load_text(tmp_path, grid_text(batch_window_ms="200", weight_bytes_per_param='["fp16", "fp8", "int4"]'))
    assert g.axis("batch_window_ms").values == (200.0,)
    assert g.axis("weight_bytes_per_param").values == (2.0, 1.0, 0.5)


def test_defaults(tmp_path):
    g = load_text(tmp_path, grid_text(drop=("gpus_per_replica",)))
    assert g.axis("gpus_per_replica").values == (1,)
    assert g.axis("replicas").values == (1,)
    assert g.axis("percentile").values == (0.99,)
    assert g.axis("batch_window_ms").values == (math.inf,)
    assert g.facts["mean_follows_seq_len"]
    assert g.options == spec.Options() and g.output.points == "all"


def test_roofline_when_times_omitted(tmp_path):
    g = load_text(tmp_path, grid_text(drop=("t_fixed_ms", "t_req_ms")))
    assert g.service_source == "roofline"
    # efficiencies default to the GPU entry's calibrated figures, else SPEC 13's 0.7 / 0.6:
    # computed per point, not a grid axis
    assert "eta_bw" not in {a.key for a in g.axes}


def test_inline_catalog_entry(tmp_path):
    text = grid_text(model='"my-70b"', tables="""
        [catalog.models.my-70b]
        attention = "gqa"
        n_layers = 80
        hidden = 8192
        n_heads = 64
        n_kv_heads = 8
        head_dim = 128
        n_params = 70e9
    """)
    g = load_text(tmp_path, text)
    assert g.models[0].name == "my-70b" and g.models[0].kv_bytes_per_token(2) == 80 * 2 * 8 * 128 * 2


REJECTIONS = [
    # (description, text kwargs, key in message, fragment of the rule)
    ("unknown key", dict(batchsize="8"), "grid.batchsize", "did you mean 'batch_size'"),
    ("float for int", dict(batch_size="[1.0, 8]"), "grid.batch_size", "integer"),
    ("bool for number", dict(arrival_rps="true"), "grid.arrival_rps", "number"),
    ("empty axis", dict(batch_size="[]"), "grid.batch_size", "must not be empty"),
    ("negative rate", dict(arrival_rps="-5.0"), "grid.arrival_rps",
     "must lie in [1e-06, 1e+09] requests/s, e.g. arrival_rps = [50, 100, 200]"),
    ("nan rate", dict(arrival_rps="nan"), "grid.arrival_rps", "NaN"),
    ("inf rate", dict(arrival_rps="inf"), "grid.arrival_rps", "finite"),
    ("negative time", dict(t_fixed_ms="-1.0"), "grid.t_fixed_ms", "[0, 1e+07] ms"),
    ("negative window", dict(batch_window_ms="-1"), "grid.batch_window_ms", "[0, 1e+07] ms or be inf"),
    ("negative length", dict(seq_len="-2048"), "grid.seq_len", "integer in [1, 1e+08] tokens"),
    ("percentile 1", dict(percentile="1.0"), "grid.percentile", "[0.01, 0.999999]"),
    ("percentile 0", dict(percentile="0.0"), "grid.percentile", "[0.01, 0.999999]"),
    ("rho_target 0", dict(rho_target="0.0"), "grid.rho_target", "(0, 1]"),
    ("rho_target > 1", dict(rho_target="1.2"), "grid.rho_target", "(0, 1]"),
    ("rho_max > 1", dict(rho_max="1.5"), "grid.rho_max", "(0, 1]"),
    ("rho_min >= rho_max", dict(rho_min="0.9", rho_max="0.85"), "grid.rho_min", "< rho_max"),
    ("rho_min negative", dict(rho_min="-0.1"), "grid.rho_min", "[0, 1)"),
    ("slo 0", dict(slo_ms="0.0"), "grid.slo_ms", "(0, 1e+09] ms"),
    ("eta_bw 0", dict(eta_bw="0.0"), "grid.eta_bw", "[0.001, 1]"),
    ("eta_flops > 1", dict(eta_flops="1.5"), "grid.eta_flops", "[0.001, 1]"),
    ("batch 0", dict(batch_size="[0, 8]"), "grid.batch_size", "integer in [1, 1e+06] requests"),
    ("gpus 0", dict(gpus_per_replica="0"), "grid.gpus_per_replica", "integer in [1, 4096] GPUs"),
    ("replicas float", dict(replicas="2.5"), "grid.replicas", "integer"),
    ("workers 0", dict(workers="0"), "grid.workers", "integer in [1, 1024]"),
    ("unknown model", dict(model='"gpt-3"'), "grid.model", "gpt3-175b"),
    ("unknown gpu", dict(gpu='"a100"'), "grid.gpu", "a100"),
    ("only one time", dict(drop=("t_req_ms",)), "grid.t_req_ms", "both"),
    ("missing required", dict(drop=("slo_ms",)), "grid.slo_ms", "required"),
    ("mean above max", dict(mean_seq_len="4096"), "grid.mean_seq_len", "<= seq_len"),
    ("workers analytic", dict(workers="2"), "grid.workers", "one worker per replica"),
    ("K below B full", dict(queue_capacity="4"), "grid.queue_capacity", "never fill"),
    ("duplicate", dict(batch_size="[8, 8]"), "grid.batch_size", "twice"),
    ("bad range", dict(batch_size="{start = 8, stop = 1, num = 3}"), "grid.batch_size.stop", ">= start"),
    ("range no num", dict(batch_size="{start = 1, stop = 8}"), "grid.batch_size", "exactly one of"),
    ("range bad scale", dict(batch_size='{start = 1, stop = 8, num = 3, scale = "cubic"}'),
     "grid.batch_size.scale", "log"),
    ("log from 0", dict(batch_window_ms='{start = 0, stop = 8, num = 3, scale = "log"}'),
     "grid.batch_window_ms.start", "> 0"),
    ("bad dtype", dict(kv_bytes_per_elem='"fp12"'), "grid.kv_bytes_per_elem", "unknown dtype"),
    ("windowed batch too large", dict(batch_size="8192", batch_window_ms="10"), "grid.batch_size", "4096"),
]


@pytest.mark.parametrize("what,kw,key,rule", REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_rejections_name_key_value_and_rule(tmp_path, what, kw, key, rule):
    path = write(tmp_path, grid_text(**kw))
    with pytest.raises(GridError) as info:
        spec.load(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(path)) and key in msg and rule in msg, msg


TABLE_REJECTIONS = [
    ('name = "t"\nbogus = 1\n[grid]\n', "bogus", "unknown top-level"),
    ('name = "bad name!"\n[grid]\n', "name", "[A-Za-z0-9_.-]+"),
    ("[grid]\narrival_rps = 1.0\n", "name", "required"),
    ('name = "t"\n', "grid", "[grid] table"),
]


@pytest.mark.parametrize("text,key,rule", TABLE_REJECTIONS)
def test_top_level_rejections(tmp_path, text, key, rule):
    with pytest.raises(GridError, match=None) as info:
        load_text(tmp_path, text)
    assert key in str(info.value) and rule in str(info.value)


@pytest.mark.parametrize(
    "tables,key,rule",
    [
        ('[options]\nlatency_model = "p99"\n', "options.latency_model", "gaussian"),
        ('[options]\nkv_allocation = "slab"\n', "options.kv_allocation", "paged"),
        ("[options]\nblock_tokens = 0\n", "options.block_tokens", "integer in [1, 1e+08] tokens"),
        ("[options]\nreserve_fraction = 1.0\n", "options.reserve_fraction", "[0, 1)"),
        ("[options]\nspeed = 1\n", "options.speed", "unknown option"),
        ('[output]\npoints = "some"\n', "output.points", "feasible"),
        ("[catalog.models.x]\nattention = \"mha\"\nn_layers = 0\nhidden = 1\nn_heads = 1\nn_params = 1e9\n",
         "catalog.models.x.n_layers", "integer in [1, 10000] layers"),
    ],
)
def test_table_rejections(tmp_path, tables, key, rule):
    with pytest.raises(GridError) as info:
        load_text(tmp_path, grid_text(tables=tables))
    assert key in str(info.value) and rule in str(info.value), str(info.value)


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(GridError, match="not valid TOML"):
        load_text(tmp_path, "name = \n")
    with pytest.raises(GridError, match="cannot be read"):
        spec.load(tmp_path / "nope.toml")


def test_cli_rejection_exits_2_and_writes_nothing(tmp_path, capsys):
    path = write(tmp_path, grid_text(percentile="1.5"))
    out = tmp_path / "out"
    code = main(["run", str(path), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "grid.percentile" in err and "1.5" in err
    assert not out.exists()
