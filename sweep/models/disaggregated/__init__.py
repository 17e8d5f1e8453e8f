"""Disaggregated prefill and decode (`serving = "disaggregated"`): prefill batchers feed decode engines."""
