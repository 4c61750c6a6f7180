"""Datasets, identical on every process: sharding is the backends' business, not the data's."""
