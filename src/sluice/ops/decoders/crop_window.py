"""Moved to :mod:`sluice.native.crop_window` (the pure-Python twin of the core's crop windows, below the
operators); the names stay importable here."""

from sluice.native.crop_window import check_crop_ranges, random_crop_window

__all__ = ["random_crop_window", "check_crop_ranges"]
