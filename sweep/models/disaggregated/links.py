"""The links a KV cache crosses from a prefill replica to a decode replica (SPEC 11).

    transfer = kv_bytes_per_token x P / link_bytes_per_s + link_latency_s

`link_bytes_per_s` is the bandwidth between the two replicas, one direction; the defaults
below are one port (one GPU's NIC, or one GPU's NVLink), which is what a KV transfer gets
when each GPU sends its own shard over its own port and every shard must arrive (the
slowest port sets the time). A grid overrides either figure (`link_bytes_per_s`,
`link_latency_s`).

The latencies are the fixed cost of one transfer: the fabric's small-message latency plus
the transfer library's setup (registration lookup, descriptor exchange, completion). They
are round figures chosen here (docs/disaggregated.md says why), not measurements: override
`link_latency_s` with a measured one.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The link that carries the GPU catalog's own figure (`interconnect_bytes_per_s`).
NVLINK = "nvlink"


@dataclass(frozen=True)
class LinkEntry:
    """One link: its one-direction bandwidth per port (None: the GPU entry's NVLink figure),
    its fixed latency per transfer, and where the bandwidth comes from."""

    name: str
    bytes_per_s: float | None
    latency_s: float
    source: str


LINKS: dict[str, LinkEntry] = {e.name: e for e in (
    LinkEntry(NVLINK, None, 5e-6,
              "the GPU catalog's interconnect_bytes_per_s (NVLink, one direction per GPU), e.g. H100 SXM "
              "450 GB/s: https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"),
    LinkEntry("ib-ndr", 400e9 / 8, 10e-6,
              "InfiniBand NDR, 400 Gb/s per port (ConnectX-7): "
              "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction"),
    LinkEntry("ib-hdr", 200e9 / 8, 10e-6,
              "InfiniBand HDR, 200 Gb/s per port (ConnectX-6): "
              "https://docs.nvidia.com/networking/display/ConnectX6VPI/Introduction"),
    LinkEntry("roce-400g", 400e9 / 8, 20e-6,
              "400 GbE with RoCE v2 (ConnectX-7, 400GbE per port): "
              "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction"),
    LinkEntry("roce-100g", 100e9 / 8, 20e-6,
              "100 GbE with RoCE v2 (ConnectX-7, dual-port 100GbE QSFP112): "
              "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction"),
)}
