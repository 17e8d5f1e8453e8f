"""Pieces every serving mode uses: KV-cache memory, the roofline step time, the service-time
coefficients, and the columns and domains the modes have in common."""
