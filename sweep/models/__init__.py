"""Serving models: per-step service-time estimates (the SPEC 13 roofline) for the kernels."""
