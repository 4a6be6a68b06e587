"""sluice operators: readers."""
