"""Files: Parquet schemas and writers, the staging folder, the column reference.

Owns how declared columns become Arrow schemas (units and meanings as field metadata),
streaming record batches into Parquet, concatenating parts, and the staging folder whose
`commit` publishes a run atomically. Knows nothing of queueing or Optuna.
"""

from __future__ import annotations

from sweep.io.parquet import DatasetWriter, arrow_schema, concat_parquet, record_batch
from sweep.io.staging import STAGING_PREFIX, Staging

__all__ = ["STAGING_PREFIX", "DatasetWriter", "Staging", "arrow_schema", "concat_parquet", "record_batch"]
