"""Serving models on the plug-in interface (SPEC 10 onwards)."""
