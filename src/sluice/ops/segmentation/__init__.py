"""Segmentation operators: segmentation.random_object_bbox, random_mask_pixel, select_masks."""
