"""distbench: one training task, several data-parallel backends, compared fairly."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1
