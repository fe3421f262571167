"""What a driver carries across attempts and worker restarts (stored as the record's `ctx` field).

The model itself lives in store/records.py, with the other stored shapes."""

from __future__ import annotations

from store.records import Attempt, Context, PendingRepair, RepairRecord, RepairResult

__all__ = ["Attempt", "Context", "PendingRepair", "RepairRecord", "RepairResult"]
