"""sluice operators: decoders."""
