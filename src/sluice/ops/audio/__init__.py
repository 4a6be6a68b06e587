"""sluice operators: audio."""
