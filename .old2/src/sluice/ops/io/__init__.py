"""sluice operators: input/output of raw data (``fn.io.file.read``)."""
