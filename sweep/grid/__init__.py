"""Grid files: read, validate and build a frozen `GridSpec` (SPEC 8).

Owns everything a user writes: the `[grid]`, `[options]`, `[output]`, `[simulation]`,
`[profile]` and `[search]` tables, and the profile fit behind `[profile]` and `sweep fit`.
Every problem is a one-line `GridError` (or `ProfileError`) raised before any work starts.
The parameters and cross-field rules of each serving model come from `sweep.models`.
"""

from __future__ import annotations

from sweep.grid.load import build, load
from sweep.grid.spec import Axis, GridSpec, Options, OutputOptions, SimulationOptions

__all__ = ["Axis", "GridSpec", "Options", "OutputOptions", "SimulationOptions", "build", "load"]
