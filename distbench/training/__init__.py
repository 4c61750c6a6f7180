"""The training engine: one process's run from its checks to its record (loop), its timing (timer), the record
(record) and its writer (reporter), checkpoints (checkpoint, rng) and the fairness contract's checks (fairness)."""
