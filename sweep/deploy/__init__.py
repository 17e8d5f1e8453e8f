"""Deployable output: the launch command of one continuous-serving configuration for vLLM,
SGLang or TensorRT-LLM, the benchmark command that checks its prediction, and the figures that
benchmark should print (docs/deploy.md). Pure Python: no JAX, no kernel runs.

    from sweep.deploy import deployment, meta_of
    dep = deployment(row, meta_of(spec))      # row: one point's columns (points/, sweep.api.explain)
    print(dep.text())                         # Markdown: launch, benchmark, predicted figures
    dep.write("runs/chat")                    # runs/chat/deploy/README.md, launch.sh, bench.sh

`row` is a mapping of the continuous model's point columns; `meta` carries the grid's options
(engine, kv_allocation, block_tokens, reserve_fraction, latency_model) and catalog entries.
"""

from __future__ import annotations

from sweep.deploy.bench import Figure, Lengths
from sweep.deploy.engines import ENGINES, PORTS
from sweep.deploy.memory import Memory, kv_share
from sweep.deploy.plan import FOLDER, Deployment, deployment, meta_of

__all__ = [
    "ENGINES",
    "FOLDER",
    "PORTS",
    "Deployment",
    "Figure",
    "Lengths",
    "Memory",
    "deployment",
    "kv_share",
    "meta_of",
]
