"""Generic tensor operators: normalize, pad, slice, one_hot."""
