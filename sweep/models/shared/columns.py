"""The grid domains and point columns every serving mode shares, declared once.

A mode's `params` and `columns` pick from these where the key or column means the same
thing in it (the scenario axes, the roofline efficiencies, the dtypes, the weights and
the fleet's cost), and declare the rest itself.
"""

from __future__ import annotations

from sweep.models.base import WHEN_ROOFLINE, Column, Domain, Param

#: Where each shared numeric `[grid]` key is valid (docs/grid.md): ranges a planner can mean,
#: inside which `tests/test_domains.py` finds every output finite or +inf, never NaN. One
#: comment says why each ends where it does.
DOMAINS: dict[str, Domain] = {
    # a replica spans at most a few hundred GPUs today (an NVL72 rack is 72); 4096 is headroom
    "gpus_per_replica": Domain(1, 4096, "GPUs"),
    # one request per 11.6 days to 1e9/s, 100x beyond the largest public inference services
    "arrival_rps": Domain(1e-6, 1e9, "requests/s"),
    # 0 to 1e7 ms = 2.8 hours for one forward pass
    "t_fixed_ms": Domain(0, 1e7, "ms"),
    # the bounds `sweep calibrate` fits efficiencies within; below 0.1% of the datasheet is a broken setup
    "eta_bw": Domain(1e-3, 1),
    "eta_flops": Domain(1e-3, 1),
    # from half-bit codes (1/16 B) to fp64 (8 B)
    "weight_bytes_per_param": Domain(0.0625, 8, "bytes"),
    "kv_bytes_per_elem": Domain(0.0625, 8, "bytes"),
    # P1 to P99.9999: below P1 is not a latency objective; beyond six nines no run observes it
    "percentile": Domain(0.01, 0.999999),
    # utilisations: shares of the replica's capacity
    "rho_max": Domain(0, 1, lo_open=True),
    "rho_min": Domain(0, 1, hi_open=True),
    # waiting requests (the simulator); above 1e9 a queue never fills in a run: use inf
    "queue_capacity": Domain(1, 1e9, "requests", inf=True),
    # lognormal service noise; a CV above 10 is not a service time (the proxy's E[S^3] grows as CV^6)
    "service_cv": Domain(0, 10),
    # a fleet of up to a million replicas of one configuration
    "replicas": Domain(1, 1e6, "replicas"),
}

#: The numeric `[options]` of KV memory every mode reads, with their domains: a paged block is
#: at most one longest sequence (1e8 tokens); the reserve is a share of HBM.
OPTION_PARAMS: dict[str, Param] = {
    "block_tokens": Param("block_tokens", "int", 16, Domain(1, 1e8, "tokens"), example="block_tokens = 16"),
    "reserve_fraction": Param("reserve_fraction", "float", 0.0, Domain(0, 1, hi_open=True),
                              example="reserve_fraction = 0.1"),
}

MODEL = Column("model", "dict", "-", "Model catalog name.")
GPU = Column("gpu", "dict", "-", "GPU catalog name.")
GPUS_PER_REPLICA = Column("gpus_per_replica", "int64", "GPUs", "GPUs per replica (tensor parallel degree).")
ARRIVAL_RPS = Column("arrival_rps", "float64", "requests/s", "Total arrival rate for the fleet.")
REPLICAS = Column("replicas", "int64", "replicas", "Replicas sharing the load (random split).")
ETA_BW = Column("eta_bw", "float64", "-", "Roofline HBM-bandwidth efficiency: the grid's, else the GPU entry's "
                "calibrated one, else 0.7.", WHEN_ROOFLINE)
ETA_FLOPS = Column("eta_flops", "float64", "-", "Roofline compute efficiency: the grid's, else the GPU entry's "
                   "calibrated one, else 0.6.", WHEN_ROOFLINE)
KV_BYTES_PER_ELEM = Column("kv_bytes_per_elem", "float64", "bytes", "KV-cache dtype size.")
WEIGHTS_GB = Column("weights_gb", "float64", "GB", "n_params x weight_bytes_per_param.")
FREE_GB = Column("free_gb", "float64", "GB", "HBM left for the KV cache after weights and reserve (negative: "
                 "weights do not fit).")
WEIGHTS_FIT = Column("weights_fit", "bool", "-", "free_gb >= 0.")
COST_USD_PER_HOUR = Column("cost_usd_per_hour", "float64", "USD/h", "replicas x gpus_per_replica x usd_per_gpu_hour "
                           "(illustrative prices).")
