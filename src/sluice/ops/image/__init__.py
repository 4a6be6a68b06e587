"""sluice operators: image."""
