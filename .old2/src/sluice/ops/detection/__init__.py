"""Bounding-box and coordinate operators: bb_flip, coord_flip, random_bbox_crop."""
