"""Shards (`sweep run --shard i/n`, `sweep merge`; `sweep.runner.shards`): disjoint slices
that combine to exactly one run's outputs."""

from __future__ import annotations

import itertools
import json
import shutil

import pytest
from _grids import WINDOWED, same, tables

from sweep import grid as spec
from sweep.errors import OutputError
from sweep.runner import Shard, merge_shards, run_grid


def test_shards_combine_to_exactly_one_run(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(WINDOWED + '\n[output]\npartition_by = ["model", "gpu"]\n')
    g = spec.load(p)
    run_grid(g, tmp_path / "one", chunk_size=64)
    for i in (1, 2, 3):
        r = run_grid(g, tmp_path / "split", chunk_size=64, shard=Shard(i, 3))
        assert r.out_dir == tmp_path / "split" / "shards" / f"{i:04d}-of-0003"
    shutil.move(tmp_path / "split" / "shards" / "0002-of-0003", tmp_path / "away")
    with pytest.raises(OutputError, match=r"shards \[2\] of 3 are missing"):
        merge_shards(tmp_path / "split")
    shutil.move(tmp_path / "away", tmp_path / "split" / "shards" / "0002-of-0003")
    merged = merge_shards(tmp_path / "split")
    assert merged["rows"]["points_written"] == g.n_points
    same(tables(tmp_path / "one"), tables(tmp_path / "split"))
    # Shards are disjoint slices: their point ranges tile the grid.
    ranges = [json.loads((tmp_path / "split" / "shards" / f"{i:04d}-of-0003" / "manifest.json")
                         .read_text())["shard"]["points"] for i in (1, 2, 3)]
    assert (ranges[0][0] == 0 and ranges[-1][1] == g.n_points
            and all(a[1] == b[0] for a, b in itertools.pairwise(ranges)))


@pytest.mark.parametrize("damage", ["garbage manifest", "truncated points", "missing optimum", "other split"])
def test_a_damaged_shard_is_refused_and_the_merged_output_kept(tmp_path, damage, capsys):
    from sweep.cli import main

    p = tmp_path / "w.toml"
    p.write_text(WINDOWED)
    g = spec.load(p)
    split = tmp_path / "split"
    for i in (1, 2):
        run_grid(g, split, chunk_size=64, shard=Shard(i, 2))
    merge_shards(split)
    before = tables(split)
    shard = split / "shards" / "0002-of-0002"
    if damage == "garbage manifest":
        (shard / "manifest.json").write_text("{garbage")
    elif damage == "truncated points":
        # a new, truncated file (the merged output hard-links the shard's files: damage made
        # in place to a shard's file would reach the merged copy too, and its checksums say so)
        part = next((shard / "points").rglob("*.parquet"))
        head = part.read_bytes()[:100]
        part.unlink()
        part.write_bytes(head)
    elif damage == "missing optimum":
        (shard / "optimum.parquet").unlink()
    else:
        run_grid(g, split, chunk_size=64, shard=Shard(1, 3))
    assert main(["merge", str(split), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sweep: error: ")
    same(before, tables(split))  # the previous merged output, whole


def test_shards_of_other_inputs_are_not_merged(tmp_path, capsys):
    """Shard 2 computed after the H100's price was edited in a catalog folder: the same
    grid text, other inputs (the manifests' `inputs.digest` differ): one line, exit 2."""
    from test_runner_identity import ROOF, _catalog, _load

    from sweep.cli import main

    grid = tmp_path / "roof.toml"
    grid.write_text(ROOF)
    split = tmp_path / "split"
    run_grid(_load(grid, _catalog(tmp_path, 3.35e12, 2.5)), split, shard=Shard(1, 2))
    run_grid(_load(grid, _catalog(tmp_path, 3.35e12, 3.0)), split, shard=Shard(2, 2))
    assert main(["merge", str(split), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "shard 2 ran other inputs than shard 1" in err, err
    assert not (split / "manifest.json").exists()
    run_grid(_load(grid, _catalog(tmp_path, 3.35e12, 3.0)), split, shard=Shard(1, 2))  # both with the edit
    merged = merge_shards(split)
    assert len(merged["shards"]["segments"]) == 2 and all(merged["shards"]["segments"])
    assert merged["machines"] and "segments" not in merged
