import os

# The in-process tests run offline and single-threaded, like the launched ones.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DISTBENCH_NO_DOWNLOAD", "1")
