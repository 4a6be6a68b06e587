"""sluice torch."""
