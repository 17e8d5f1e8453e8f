"""`serving = "disaggregated"`: prefill and decode pools in series (SPEC 11; docs/disaggregated.md).

`DisaggregatedModel` is the tandem of the prefill pool (`PrefillPool`, the dynamic batcher
prefilling prompts) and the decode pool (`DecodePool`, continuous batching with prompts
already cached), joined by the KV transfer (`KvTransfer`, the link catalog `LINKS`).
"""

from sweep.models.disaggregated.decode import DecodePool
from sweep.models.disaggregated.links import LINKS, LinkEntry
from sweep.models.disaggregated.model import MODELS, DisaggregatedModel, KvTransfer
from sweep.models.disaggregated.prefill import PrefillPool

__all__ = ["LINKS", "MODELS", "DecodePool", "DisaggregatedModel", "KvTransfer", "LinkEntry", "PrefillPool"]
