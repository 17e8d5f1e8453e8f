"""The simulator's settings in the benchmarks' smoke runs (`--smoke`, the test suite's check
that each script works).

Tiny, and one compiled program for every script: the simulator compiles per chunk shape
(scenarios per chunk x replications x arrivals) and per number of worker slots, so every
smoke run simulates chunks of 64 scenarios x 2 replications x 350 arrivals with 4 worker
slots (a scenario with fewer workers leaves the others idle: the answers are the same).
When the scripts run in one process, as in the test suite, only the first compiles it.
"""

from __future__ import annotations

SIM = {"n_requests": 300, "warmup": 50, "replications": 2}
SIM_OPTIONS = {"max_lanes": 128, "max_workers": 4}
