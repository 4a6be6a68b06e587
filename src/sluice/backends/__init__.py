"""sluice backends."""
