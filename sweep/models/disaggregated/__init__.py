"""Disaggregated prefill and decode (`serving = "disaggregated"`): prefill batchers feed decode
engines (SPEC 11; docs/disaggregated.md).

`DisaggregatedModel` is the analytic model: the tandem of the prefill pool (`PrefillPool`,
the dynamic batcher prefilling prompts) and the decode pool (`DecodePool`, continuous
batching with prompts already cached), joined by the KV transfer (`KvTransfer`, the link
catalog `LINKS`). `sweep.models.disaggregated.sim` simulates both pools request by request;
`SimulatedDisaggregated` (`latency_model = "simulated"`) lets it decide, as a host pass
(`sweep.models.disaggregated.simulation`).

    latency_model = "analytic"    the tandem of the two pools' models (the default)
                    "simulated"   the simulator of both pools as a host pass
"""

from sweep.models.disaggregated.decode import DecodePool
from sweep.models.disaggregated.links import LINKS, LinkEntry
from sweep.models.disaggregated.model import MODELS, DisaggregatedModel, KvTransfer, SimulatedDisaggregated
from sweep.models.disaggregated.prefill import PrefillPool

__all__ = ["LINKS", "MODELS", "DecodePool", "DisaggregatedModel", "KvTransfer", "LinkEntry", "PrefillPool",
           "SimulatedDisaggregated"]
